"""jaxarena.llm.testing: a local Ollama stand-in with fault injection, for tests and benchmarks.

- `server`: the HTTP server (`python -m jaxarena.llm.testing.server --port 0`)
  speaking the part of Ollama's API that `OllamaBackend` uses.
- `faults`: `FaultConfig` (delays, slots, fault probabilities) and the seeded fault stream.
- `responders`: what it answers with: the embedded model, `hash_digit` or a fixed text.
- `process`: `ServerProcess`, which runs the server as a child process.

Nothing in the rest of the package imports this; it needs no extra dependencies.
Names are loaded on first use, so `python -m jaxarena.llm.testing.server` does
not import the server module twice.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "FAULT_KINDS": "faults",
    "GARBAGE_REPLIES": "faults",
    "EMPTY_REPLIES": "faults",
    "FaultConfig": "faults",
    "draw_fault": "faults",
    "Responder": "responders",
    "RESPONDERS": "responders",
    "hash_digit": "responders",
    "make_responder": "responders",
    "serve": "server",
    "ServerProcess": "process",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

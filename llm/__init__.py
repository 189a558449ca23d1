"""jaxarena.llm: the LLM that picks the squad's strategy tag every 5 s (paper, Table 10).

- `prompt`: the Table 10 prompt (`build_prompt`) and reply parser (`parse_tag`).
- `backends`: `ollama.OllamaBackend` (a real Ollama server) and
  `embedded.EmbeddedBackend` (the default: a small model run by our own JAX code);
  `backends.make_backend(name, ...)` builds either by name.
- `selector.TagSelector`: batched, deduplicated, cached tag selection with a
  decision log, called from jitted code through `io_callback`.
- `rollout.rollout_with_llm` / `make_rollout`: batched evaluation episodes with
  any tag source (LLM, fixed tag, schedule, learned selector).
- `history`: what a player saw at the last few decision points (`DecisionHistory`),
  the input of opponent deduction (`deduction`) and of the selector's inputs.
- `testing`: a local Ollama stand-in with fault injection, for tests and benchmarks
  (`testing.ServerProcess`; `python -m jaxarena.llm.testing.server`).

`TAG_NAMES` is re-exported from `jaxarena.names`, where the tag names, fallback
reasons and feature names are defined.

Names are loaded on first use, so importing one part (say, the prompt) does
not pull in the others' dependencies (ollama, httpx, the embedded model).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Prompt": "types",
    "Reply": "types",
    "Backend": "types",
    "SYSTEM": "prompt",
    "TAG_NAMES": "jaxarena.names",
    "build_prompt": "prompt",
    "parse_tag": "prompt",
    "TagSelector": "selector",
    "SelectorStats": "selector",
    "make_backend": "backends",
    "rollout_with_llm": "rollout",
    "make_rollout": "rollout",
    "fixed_tags": "jaxarena.tag_sources",
    "schedule_tags": "jaxarena.tag_sources",
    "RolloutResult": "jaxarena.runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = _EXPORTS[name]
        return getattr(importlib.import_module(module if "." in module else f".{module}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""LLM backends. Each implements `types.Backend`: `async generate(prompts) -> replies`.

- `ollama.OllamaBackend`: an Ollama server through the official client (the paper's set-up).
- `embedded.EmbeddedBackend`: the default; a small model run by our own JAX code, no server.

`make_backend(name, **kwargs)` builds either by name. Modules are imported on
demand so that using one backend never loads the other's dependencies.
"""

from __future__ import annotations

from typing import Any

from ..types import Backend

#: The names `make_backend` accepts; the first is the default.
BACKENDS: tuple[str, ...] = ("embedded", "ollama")


def make_backend(name: str = "embedded", **kwargs: Any) -> Backend:
    """Builds a backend by name: "embedded" (default, no server) or "ollama".

    `kwargs` go to the backend's constructor (`EmbeddedBackend` or
    `OllamaBackend`), e.g. `make_backend("ollama", model="mistral", host=...)`.
    Raises ValueError for an unknown name and TypeError for an argument the
    chosen backend does not take, both naming what is supported.
    """
    if name == "embedded":
        from .embedded import EmbeddedBackend as backend_class
    elif name == "ollama":
        try:
            from .ollama import OllamaBackend as backend_class
        except ImportError as exc:
            raise ImportError(
                f"the 'ollama' LLM backend needs the ollama and httpx packages ({exc}); "
                "install them with: pip install 'jaxarena[llm]'"
            ) from exc
    else:
        raise ValueError(f"unknown LLM backend {name!r}; supported backends: {', '.join(map(repr, BACKENDS))}")
    try:
        return backend_class(**kwargs)
    except TypeError as exc:
        raise TypeError(f"bad arguments for the {name!r} LLM backend ({backend_class.__name__}): {exc}") from exc

"""LLM backends. Each implements `types.Backend`: `async generate(prompts) -> replies`.

- `ollama.OllamaBackend`: an Ollama server through the official client (the paper's set-up).
- `embedded.EmbeddedBackend`: the default; a small model run by our own JAX code, no server.
- `gguf.GGUFBackend`: any local GGUF (llama/Mistral, qwen2; a file or `ollama:NAME[:TAG]`)
  through the same JAX code.

`make_backend(name, **kwargs)` builds one by name; `parse_llm_spec` turns a
command-line spec ("embedded", "ollama", "gguf:PATH") into that name and
arguments. Modules are imported on demand so that using one backend never
loads another's dependencies.
"""

from __future__ import annotations

from typing import Any

from ..types import Backend

#: The names `make_backend` accepts; the first is the default.
BACKENDS: tuple[str, ...] = ("embedded", "ollama", "gguf")
#: How a command line names each backend.
LLM_SPECS = "embedded, ollama, gguf:PATH or gguf:ollama:NAME[:TAG]"


def parse_llm_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """ "embedded" → ("embedded", {}); "gguf:PATH" → ("gguf", {"path": PATH}).

    Raises ValueError, naming the accepted forms, for anything else (including
    a bare "gguf" without a path).
    """
    name, sep, rest = str(spec).partition(":")
    if name == "gguf" and rest:
        return "gguf", {"path": rest}
    if name in BACKENDS and name != "gguf" and not sep:
        return name, {}
    raise ValueError(f"unknown LLM {spec!r}; choose from {LLM_SPECS}")


def make_backend(name: str = "embedded", **kwargs: Any) -> Backend:
    """Builds a backend by name: "embedded" (default, no server), "ollama", or "gguf" (needs `path`).

    `kwargs` go to the backend's constructor (`EmbeddedBackend`,
    `OllamaBackend` or `GGUFBackend`), e.g. `make_backend("ollama",
    model="mistral", host=...)` or `make_backend("gguf", path="ollama:mistral")`.
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
    elif name == "gguf":
        from .gguf import GGUFBackend as backend_class

        if "path" not in kwargs:
            raise TypeError("the 'gguf' LLM backend needs path=: a .gguf file or ollama:NAME[:TAG]")
    else:
        raise ValueError(f"unknown LLM backend {name!r}; supported backends: {', '.join(map(repr, BACKENDS))}")
    try:
        return backend_class(**kwargs)
    except TypeError as exc:
        raise TypeError(f"bad arguments for the {name!r} LLM backend ({backend_class.__name__}): {exc}") from exc

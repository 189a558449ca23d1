"""LLM backends. Each implements `types.Backend`: `async generate(prompts) -> replies`.

- `ollama.OllamaBackend`: an Ollama server through the official client (the paper's set-up).
- `embedded.EmbeddedBackend`: the default; a small model run by our own JAX code, no server.

Modules are imported on demand so that using one backend never loads the other's dependencies.
"""

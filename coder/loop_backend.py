"""The LLM backend of a coder run: built from its `LoopConfig`, checked before use, asked in batches."""

from __future__ import annotations

import asyncio

from .loop_config import CODER_TOP_P, DEFAULT_OLLAMA_MODEL, LoopConfig


def make_loop_backend(config: LoopConfig, adapter: str | None = None):
    """The backend for a run: free generation with `max_tokens` new tokens, seeded.

    `adapter`: a LoRA adapter (a directory or a shipped name) for this backend's
    replies; the loop gives the coder its own backend with `coder_adapter`.
    """
    from jaxarena.llm.backends import make_backend, parse_llm_spec

    name, extra = parse_llm_spec(config.llm)
    if name == "ollama":
        options = {
            "num_predict": config.max_tokens,
            "temperature": config.temperature,
            "top_p": CODER_TOP_P,
            "seed": config.seed,
            # Ollama's default context (2-4 k tokens) would silently cut the coder's prompt (~3 k tokens).
            "num_ctx": 8192,
        }
        return make_backend(
            "ollama",
            model=config.model or DEFAULT_OLLAMA_MODEL,
            host=config.host,
            timeout_s=config.timeout_s,
            options=options,
            decode="free",
        )
    from jaxarena.llm.adapters import resolve_adapter
    from jaxarena.llm.generate import GGUFGenerator

    kwargs = dict(
        extra,
        decode="free",
        num_predict=config.max_tokens,
        temperature=config.temperature,
        top_p=CODER_TOP_P,
        seed=config.seed,
        max_batch=config.k,
    )
    backend = make_backend(name, **kwargs)
    check_backend(backend)  # before the generator loads the weights
    # The default suffix buckets stop at 512 tokens after the shared system prefix; a coder prompt that
    # carries a plan, a suggestion and the previous program needs more.
    generator = GGUFGenerator(
        gguf_path=backend.gguf_path,
        max_new_tokens=config.max_tokens,
        seed=config.seed,
        batch_buckets=tuple(sorted({1, config.k})),
        suffix_buckets=(128, 256, 512, 1024, 2048),
        adapter=resolve_adapter(adapter, kind="coder-adapter") if adapter else None,
    )
    return make_backend(name, **kwargs, generator=generator)


def generate(backend, prompts) -> list:
    """Replies for `prompts` from any `Backend`, blocking."""
    if hasattr(backend, "generate_sync"):
        return backend.generate_sync(prompts)
    return asyncio.run(backend.generate(prompts))


def check_backend(backend) -> None:
    """Fails early, with the fix, when the LLM cannot answer (`jaxarena.llm.preflight`)."""
    from jaxarena.llm.preflight import preflight

    preflight(backend)

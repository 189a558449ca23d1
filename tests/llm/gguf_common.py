"""Shared objects for the gguf-backend tests: the synthetic fixtures and their generators (built once)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "llm" / "fixtures"
ARCHS = ("llama", "qwen2")


def gguf_path(arch: str) -> Path:
    return FIXTURES / f"tiny_{arch}.gguf"


@functools.cache
def reference(arch: str) -> dict:
    """HF transformers' numbers for the fixture (tools/make_gguf_fixtures.py)."""
    return json.loads((FIXTURES / f"tiny_{arch}_reference.json").read_text())


@functools.cache
def generator(arch: str, precision: str = "f32"):
    """A GGUFGenerator on the fixture: "f32" keeps the dequantized float32 weights, "bf16" is the default path."""
    import jax.numpy as jnp

    from jaxarena.llm.generate import GGUFGenerator
    from jaxarena.llm.weights import load_model

    f32 = precision == "f32"
    loaded = load_model(gguf_path(arch), use_cache=False, float32=f32)
    return GGUFGenerator(
        loaded, dtype=jnp.float32 if f32 else None, batch_buckets=(1, 8), suffix_buckets=(64, 128, 256)
    )

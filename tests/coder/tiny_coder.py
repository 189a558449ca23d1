"""The tiny llama fixture as the coder-tuning tests' model, and a random adapter for it."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

from jaxarena.llm import lora as L

FIXTURE = Path(__file__).resolve().parents[2] / "llm" / "fixtures" / "tiny_llama.gguf"
SYSTEM = "Role: coder. Write one policy in the squad-policy language."


def make_tiny_generator():
    """A float32 generator of the tiny fixture: 12 new tokens, small buckets (its context is 512 tokens)."""
    from jaxarena.llm.generate import GGUFGenerator
    from jaxarena.llm.weights import load_model

    loaded = load_model(FIXTURE, use_cache=False, float32=True)
    return GGUFGenerator(
        loaded, dtype=jnp.float32, max_new_tokens=12, batch_buckets=(1, 4), suffix_buckets=(64, 128, 256)
    )


def random_adapter(cfg, lora, key, scale=0.3):
    """A LoRA adapter with every factor random (a zero one would leave the model as it is)."""
    leaves, tree = jax.tree.flatten(L.init_adapter(cfg, lora, key))
    keys = jax.random.split(jax.random.fold_in(key, 1), len(leaves))
    return jax.tree.unflatten(tree, [scale * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves, strict=True)])

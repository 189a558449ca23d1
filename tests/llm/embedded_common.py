"""Shared, process-wide objects for the embedded-LLM tests (loaded once).

Loading the weights (a warm cache read) and compiling the programs are the
slow parts, so every test module asks this module for the same objects.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[2] / "llm" / "fixtures" / "smollm2_reference.json"


def _require_weights():
    from jaxarena.llm.weights import find_gguf

    try:
        return find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@functools.cache
def reference() -> dict:
    """The llama.cpp reference made by tools/make_llm_reference.py."""
    return json.loads(FIXTURE.read_text())


@functools.cache
def _loaded():
    from jaxarena.llm.weights import load_model

    return load_model()


def loaded():
    """The LoadedModel (weights from the user cache after the first run)."""
    _require_weights()
    return _loaded()


@functools.cache
def _generator(dtype_name: str):
    import jax.numpy as jnp

    from jaxarena.llm.generate import SmolLM2Generator

    dtype = None if dtype_name == "bf16" else getattr(jnp, dtype_name)
    # Small buckets keep compile time down; tests use at most 8 prompts a call.
    return SmolLM2Generator(_loaded(), dtype=dtype, batch_buckets=(1, 4, 8), suffix_buckets=(64, 128, 512))


def generator(dtype_name: str = "bf16"):
    """A SmolLM2Generator shared by all tests ("bf16" default or "float32")."""
    _require_weights()
    return _generator(dtype_name)

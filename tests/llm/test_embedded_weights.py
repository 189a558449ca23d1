"""Weights: the Q/K un-permutation, and the dequantized-weights cache."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxarena.llm import dequantize, weights, weights_cache
from jaxarena.llm.gguf_config import ModelConfig


def _rope_pairs(x, pos, base=100000.0):
    """llama.cpp's "normal" RoPE: adjacent pairs (2i, 2i+1) rotate together."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    out = x.copy()
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 1::2] * c + x[..., 0::2] * s
    return out


def _rope_half(x, pos, base=100000.0):
    """HF's rotate-half RoPE: dims i and i + d/2 rotate together."""
    d = x.shape[-1]
    h = d // 2
    inv = base ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    return np.concatenate([x[..., :h] * c - x[..., h:] * s, x[..., h:] * c + x[..., :h] * s], -1)


def test_unpermuted_rows_with_rotate_half_equal_gguf_rows_with_pair_rope():
    rng = np.random.default_rng(0)
    n_heads, head_dim, d_in = 3, 8, 5
    w_gguf = rng.normal(size=(n_heads * head_dim, d_in))  # (out, in), as gguf dequantizes
    w_ours = dequantize._unpermute_qk(w_gguf, n_heads)
    xq, xk = rng.normal(size=d_in), rng.normal(size=d_in)
    for pq, pk in [(0, 0), (7, 3), (40, 39)]:
        q_ref = _rope_pairs((w_gguf @ xq).reshape(n_heads, head_dim), pq)
        k_ref = _rope_pairs((w_gguf @ xk).reshape(n_heads, head_dim), pk)
        q_our = _rope_half((w_ours @ xq).reshape(n_heads, head_dim), pq)
        k_our = _rope_half((w_ours @ xk).reshape(n_heads, head_dim), pk)
        # Attention only sees q.k per head, which the permutation preserves.
        np.testing.assert_allclose((q_ref * k_ref).sum(-1), (q_our * k_our).sum(-1), atol=1e-9)
    # ... and it is a real permutation (not the identity) of the rows.
    assert not np.allclose(w_ours, w_gguf)
    assert sorted(map(tuple, w_ours)) == sorted(map(tuple, w_gguf))


TINY_META = {
    "general.architecture": "llama",
    "llama.block_count": 1,
    "llama.context_length": 16,
    "llama.embedding_length": 4,
    "llama.feed_forward_length": 8,
    "llama.attention.head_count": 2,
    "llama.attention.head_count_kv": 1,
    "llama.rope.freq_base": 10000.0,
    "llama.attention.layer_norm_rms_epsilon": 1e-5,
    "llama.vocab_size": 5,
}


def _tiny_arrays():
    cfg = ModelConfig.from_gguf_fields(TINY_META)
    rng = np.random.default_rng(1)
    out = {}
    for name, shape in weights_cache.expected_shapes(cfg).items():
        a = rng.normal(size=shape).astype(np.float32)
        out[name] = a if name.endswith("norm") else a.astype(ml_dtypes.bfloat16)
    return out


def test_cache_round_trip_is_exact(tmp_path):
    arrays = _tiny_arrays()
    path = tmp_path / "w.bin"
    weights_cache.save_atomic(path, {k: weights_cache.encode(v) for k, v in arrays.items()}, TINY_META)
    meta, back = weights_cache.read_cache(path)
    assert meta == TINY_META
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        assert np.array_equal(back[k].view(np.uint8), v.view(np.uint8))
    assert [p.name for p in tmp_path.iterdir()] == ["w.bin"]  # no temp file left


def test_bad_caches_are_rejected(tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"not a cache at all")
    with pytest.raises(ValueError):
        weights_cache.read_cache(garbage)
    arrays = _tiny_arrays()
    del arrays["wq"]
    short = tmp_path / "short.bin"
    weights_cache.save_atomic(short, {k: weights_cache.encode(v) for k, v in arrays.items()}, TINY_META)
    with pytest.raises(ValueError, match="wq"):
        weights_cache.read_cache(short)


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXARENA_CACHE", str(tmp_path))
    assert weights.cache_dir() == tmp_path
    monkeypatch.delenv("JAXARENA_CACHE")
    assert weights.cache_dir().name == "jaxarena"


@pytest.mark.slow
def test_load_model_builds_then_reuses_the_cache(monkeypatch, tmp_path):
    try:
        weights.find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("JAXARENA_CACHE", str(tmp_path))
    cold = weights.load_model()
    assert not cold.from_cache
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and cold.sha256[:16] in files[0].name
    warm = weights.load_model()
    assert warm.from_cache and warm.config == cold.config
    for k in cold.weights:
        assert np.array_equal(cold.weights[k].view(np.uint8), warm.weights[k].view(np.uint8))
    # A corrupted cache is rebuilt, not trusted.
    files[0].write_bytes(b"JXAW0001" + b"\xff" * 64)
    again = weights.load_model()
    assert not again.from_cache

"""The llama/qwen2 forward pass (SmolLM2, Mistral, Qwen2) in plain `jax.numpy`.

qwen2 differs from llama only by q/k/v biases (`bqkv`, present only when the
model has them, so llama's graph is unchanged); both use rotate-half RoPE here
(see `dequantize.dequantize_all`).

Everything here is pure and jittable. SmolLM2's 30 blocks are an unrolled Python loop
over per-layer weights (see `layers_forward` for the measurements that ruled
out `lax.scan` on CPU). Weights are bf16; RMSNorm, RoPE angles and
the softmax run in float32, and matrix products accumulate in float32.

Attention always sees two blocks of keys:

* a *prefix* block shared by the whole batch (the system message's KV cache,
  computed once and reused for every batch), shape (P, kv_heads, head_dim);
* the batch's *own* keys (the suffix being read, then generated tokens),
  shape (B, S, kv_heads, head_dim).

Both blocks are masked (prefix padding; left-padding and causality in the own
block), so padded slots get exactly zero probability.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import lora
from .attention import attention, attention_bias
from .gguf_config import ModelConfig


def rms_norm(x: jax.Array, w: jax.Array, eps: float) -> jax.Array:
    """RMSNorm in float32, returned in `x`'s dtype."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * w).astype(x.dtype)


def rope_tables(positions: jax.Array, head_dim: int, base: float) -> tuple[jax.Array, jax.Array]:
    """cos/sin tables (B, T, 1, head_dim/2) for `rope`.

    Computed once per forward and shared by all 30 layers.
    """
    half = head_dim // 2
    inv_freq = base ** (-jnp.arange(half, dtype=jnp.float32) * 2.0 / head_dim)
    ang = positions.astype(jnp.float32)[..., None] * inv_freq  # (B, T, half)
    return jnp.cos(ang)[:, :, None, :], jnp.sin(ang)[:, :, None, :]


def rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotary embedding, rotate-half layout (see `dequantize._unpermute_qk`).

    x: (B, T, heads, head_dim); cos/sin from `rope_tables`.
    """
    half = x.shape[-1] // 2
    x32 = x.astype(jnp.float32)
    x1, x2 = x32[..., :half], x32[..., half:]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


@jax.custom_vjp
def _mm32(x: jax.Array, w: jax.Array) -> jax.Array:
    """x @ w accumulated in float32 (float32 result).

    Its own backward rule: the cotangent is rounded to x's dtype and multiplied
    by w's transpose in that dtype, as the forward is. JAX's default rule
    mixes a float32 cotangent with bf16 weights, which XLA:CPU runs several
    times slower (measured: LoRA training's backward 5.8x the forward, not ~2x).
    """
    return jnp.matmul(x, w, preferred_element_type=jnp.float32)


def _mm32_fwd(x, w):
    return _mm32(x, w), (x, w)


def _mm32_bwd(res, g):
    x, w = res
    g = g.astype(x.dtype)
    dx = jnp.matmul(g, jnp.swapaxes(w, -1, -2), preferred_element_type=jnp.float32).astype(x.dtype)
    if w.ndim == 2:  # a weight shared by every row
        dw = jnp.matmul(x.reshape(-1, x.shape[-1]).T, g.reshape(-1, g.shape[-1]), preferred_element_type=jnp.float32)
    else:  # batched operands (attention's scores and outputs)
        dw = jnp.matmul(jnp.swapaxes(x, -1, -2), g, preferred_element_type=jnp.float32)
    return dx, dw.astype(w.dtype)


_mm32.defvjp(_mm32_fwd, _mm32_bwd)


def _mm(x: jax.Array, w: jax.Array) -> jax.Array:
    """x @ w with float32 accumulation, result in x's dtype."""
    return _mm32(x, w).astype(x.dtype)


def _project(h: jax.Array, w: jax.Array, adapter: dict | None, matrix: str, widths, bias=None) -> jax.Array:
    """h @ w (+ bias) (+ the LoRA adapter's product), accumulated in float32, in h's dtype.

    Without a bias or an adapter on this matrix it is exactly `_mm`, so a
    base model's graph does not change. The adapter's float32 product is added
    to the accumulator before rounding: a zero adapter adds exactly 0.0.
    """
    delta = None if adapter is None else lora.fused_delta(h, adapter, matrix, widths)
    if bias is None and delta is None:
        return _mm(h, w)
    acc = _mm32(h, w)
    if bias is not None:
        acc = acc + bias
    if delta is not None:
        acc = acc + delta
    return acc.astype(h.dtype)


def block(
    cfg: ModelConfig,
    lw: dict,
    x: jax.Array,
    rope_cs: tuple[jax.Array, jax.Array],
    prefix_kv: tuple[jax.Array, jax.Array],
    own_kv: tuple[jax.Array, jax.Array] | None,
    own_offset,
    bias: jax.Array,
):
    """One transformer block on new tokens `x` (B, T, d).

    The new tokens' keys/values are written into `own_kv` (B, S, KV, D) at
    `own_offset` (or, when `own_kv` is None, they *are* the own block).
    Returns (x, (own_k, own_v)) with the updated own block.
    """
    B, T, _ = x.shape
    H, KV, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    adapter = lw.get("lora")  # a LoRA adapter attached by `lora.attach`, or None
    h = rms_norm(x, lw["attn_norm"], cfg.rms_eps)
    # One product for q, k and v (fewer, larger matmuls); a bias is added to the float32 accumulator.
    qkv = _project(h, lw["wqkv"], adapter, "wqkv", (H * D, KV * D, KV * D), lw.get("bqkv"))
    q = rope(qkv[..., : H * D].reshape(B, T, H, D), *rope_cs)
    k = rope(qkv[..., H * D : (H + KV) * D].reshape(B, T, KV, D), *rope_cs)
    v = qkv[..., (H + KV) * D :].reshape(B, T, KV, D)
    if own_kv is None:
        ok, ov = k, v
    else:
        ok = jax.lax.dynamic_update_slice_in_dim(own_kv[0], k, own_offset, axis=1)
        ov = jax.lax.dynamic_update_slice_in_dim(own_kv[1], v, own_offset, axis=1)
    a = attention(q, prefix_kv[0], prefix_kv[1], ok, ov, bias)
    x = x + _project(a.reshape(B, T, H * D), lw["wo"], adapter, "wo", (cfg.d_model,))
    h = rms_norm(x, lw["ffn_norm"], cfg.rms_eps)
    gate_up = _project(h, lw["w_gate_up"], adapter, "w_gate_up", (cfg.d_ff, cfg.d_ff))
    f = jax.nn.silu(gate_up[..., : cfg.d_ff]) * gate_up[..., cfg.d_ff :]
    x = x + _project(f, lw["w_down"], adapter, "w_down", (cfg.d_model,))
    return x, (ok, ov)


def layers_forward(
    cfg: ModelConfig,
    params: dict,
    x: jax.Array,
    positions: jax.Array,
    prefix_k: Sequence[jax.Array],
    prefix_v: Sequence[jax.Array],
    p_valid: jax.Array,
    o_mask: jax.Array,
    own_k: Sequence[jax.Array] | None = None,
    own_v: Sequence[jax.Array] | None = None,
    own_offset=0,
    remat: bool = False,
):
    """Run all blocks; caches are tuples with one array per layer.

    x: (B, T, d) new tokens at RoPE `positions` (B, T).
    prefix_k/v: per layer (P, KV, D) shared keys, valid where p_valid (P,).
    own_k/v: per layer (B, S, KV, D) cache that the new keys are written into at
    `own_offset`, or None when the new tokens are the whole own block.
    o_mask: (B, T, S) which own slots each new token may attend to.
    Returns (x, own_k, own_v).
    remat: recompute each block in the backward pass instead of keeping its
    activations (`jax.checkpoint`), for a run short of memory: 1.3x slower.
    Since the attention keeps only its bf16 probabilities (~30 MB per block
    and row over the coder's 3.2 k keys), training runs without it.

    Why a Python loop and not `lax.scan`: on XLA:CPU a scan over stacked
    weights made one decode step (32 rows) 4-9x slower (230 ms vs 57 ms; the
    loop body slices and re-lays out each weight) and batch-8 prefill ~1.5x
    slower, while the unrolled loop compiled in about the same time (~2.5 s vs
    ~2.5 s for 30 blocks). Weights are kept per layer for the same reason:
    slicing a stacked array inside the jit was slower still.
    """
    rope_cs = rope_tables(positions, cfg.head_dim, cfg.rope_base)
    bias = attention_bias(p_valid, o_mask, cfg.n_heads // cfg.n_kv_heads)
    run_block = jax.checkpoint(block, static_argnums=(0,)) if remat else block
    new_k, new_v = [], []
    for i, lw in enumerate(params["layers"]):
        own = None if own_k is None else (own_k[i], own_v[i])
        x, (k, v) = run_block(cfg, lw, x, rope_cs, (prefix_k[i], prefix_v[i]), own, own_offset, bias)
        new_k.append(k)
        new_v.append(v)
    return x, tuple(new_k), tuple(new_v)


def params_to_device(weights: dict, dtype=None) -> dict:
    """Numpy weights from `weights.load_model` → the jax params pytree.

    Stacked per-layer arrays (L, ...) become a tuple of per-layer dicts with
    fused `wqkv` (d, (H + 2 KV) D) and `w_gate_up` (d, 2 F) matrices, plus a
    fused float32 `bqkv` ((H + 2 KV) D,) when the model has q/k/v biases (qwen2).
    `dtype` (e.g. jnp.float32) recasts the matrices; activations follow the
    embedding's dtype. Norm weights and biases always stay float32.
    """

    def put(name, arr):
        if dtype is not None and not name.endswith(("norm", "bias")):
            arr = arr.astype(dtype)
        return jnp.asarray(arr)

    def layer(i):
        lw = {
            "attn_norm": put("attn_norm", weights["attn_norm"][i]),
            "ffn_norm": put("ffn_norm", weights["ffn_norm"][i]),
            # Fused at load time: q|k|v and gate|up share their input, and one
            # wide product beats several narrow ones on CPU (measured ~7%/block).
            "wqkv": put("wqkv", np.concatenate([weights[k][i] for k in ("wq", "wk", "wv")], axis=1)),
            "wo": put("wo", weights["wo"][i]),
            "w_gate_up": put("w_gate_up", np.concatenate([weights["w_gate"][i], weights["w_up"][i]], axis=1)),
            "w_down": put("w_down", weights["w_down"][i]),
        }
        if "bq_bias" in weights:
            parts = [np.asarray(weights[k][i], np.float32) for k in ("bq_bias", "bk_bias", "bv_bias")]
            lw["bqkv"] = put("bqkv_bias", np.concatenate(parts))
        return lw

    n_layers = weights["wq"].shape[0]
    layers = tuple(layer(i) for i in range(n_layers))
    out = {
        "layers": layers,
        "embed": put("embed", weights["embed"]),
        "final_norm": put("final_norm", weights["final_norm"]),
    }
    if "lm_head" in weights:
        out["lm_head"] = put("lm_head", weights["lm_head"])
    return out


def embed(params: dict, tokens: jax.Array) -> jax.Array:
    """Token embeddings (B, T, d) in the weights' dtype."""
    return jnp.take(params["embed"], tokens, axis=0)


def lm_head(cfg: ModelConfig, params: dict, x: jax.Array) -> jax.Array:
    """Final RMSNorm and output projection (tied to the embedding) → float32 logits."""
    h = rms_norm(x, params["final_norm"], cfg.rms_eps)
    if "lm_head" in params:
        return _mm32(h, params["lm_head"])
    return _tied_head32(h, params["embed"])


@jax.custom_vjp
def _tied_head32(h: jax.Array, embed: jax.Array) -> jax.Array:
    """h @ embed.T accumulated in float32, without materialising the transpose.

    Its backward rounds the (…, V) float32 cotangent to the activations' dtype, as
    `_mm32`'s does: JAX's own rule multiplies the float32 cotangent with the
    bf16 embedding, the slow mixed product on XLA:CPU, at every reply position.
    """
    return jnp.einsum("...d,vd->...v", h, embed, preferred_element_type=jnp.float32)


def _tied_head32_fwd(h, embed):
    return _tied_head32(h, embed), (h, embed)


def _tied_head32_bwd(res, g):
    h, embed = res
    g = g.astype(h.dtype)
    dh = jnp.einsum("...v,vd->...d", g, embed, preferred_element_type=jnp.float32).astype(h.dtype)
    g2, h2 = g.reshape(-1, g.shape[-1]), h.reshape(-1, h.shape[-1])
    d_embed = jnp.matmul(g2.T, h2, preferred_element_type=jnp.float32)
    return dh, d_embed.astype(embed.dtype)


_tied_head32.defvjp(_tied_head32_fwd, _tied_head32_bwd)


def empty_prefix(cfg: ModelConfig, dtype=jnp.bfloat16):
    """A zero-length prefix cache: (k, v, valid) for a forward with no prefix."""
    z = jnp.zeros((0, cfg.n_kv_heads, cfg.head_dim), dtype)
    return (z,) * cfg.n_layers, (z,) * cfg.n_layers, jnp.zeros((0,), bool)


def full_forward(cfg: ModelConfig, params: dict, tokens: jax.Array, valid: jax.Array) -> jax.Array:
    """Reference path with no cache: logits (B, T, V) for right-padded `tokens`.

    valid: (B, T) bool, True on real tokens. Used by tests to check the cached,
    left-padded generation path against the plain causal forward.
    """
    B, T = tokens.shape
    pk, pv, p_valid = empty_prefix(cfg, params["embed"].dtype)
    positions = jnp.broadcast_to(jnp.arange(T), (B, T))
    causal = jnp.tril(jnp.ones((T, T), bool))
    o_mask = causal[None] & valid[:, None, :]
    x, _, _ = layers_forward(cfg, params, embed(params, tokens), positions, pk, pv, p_valid, o_mask)
    return lm_head(cfg, params, x)

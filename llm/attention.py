"""Grouped-query attention over a shared prefix block and the batch's own block, with its own backward.

The forward pass (`model.block`) calls `attention` with a mask built once per
forward (`attention_bias`). Its backward is written by hand
(`_attention_bwd`): it keeps only the probabilities, not the float32 scores,
and it skips the prefix's key and value gradients when the prefix is a
constant (the coder's training), which autodiff could not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_NEG = -1e30  # large finite negative: avoids NaN when a row is fully masked


def _dot32(x: jax.Array, y: jax.Array) -> jax.Array:
    """x @ y (batched over leading dims) accumulated and returned in float32."""
    return jnp.matmul(x, y, preferred_element_type=jnp.float32)


def _fold_queries(q: jax.Array, n_kv: int) -> jax.Array:
    """(B, T, H, D) → (B, KV, T*G, D): each KV head's G query heads folded next to the query positions."""
    B, T, H, D = q.shape
    G = H // n_kv
    return q.reshape(B, T, n_kv, G, D).transpose(0, 2, 1, 3, 4).reshape(B, n_kv, T * G, D)


def _unfold_queries(x: jax.Array, T: int) -> jax.Array:
    """The inverse of `_fold_queries`: (B, KV, T*G, D) → (B, T, H, D)."""
    B, KV, TG, D = x.shape
    G = TG // T
    return x.reshape(B, KV, T, G, D).transpose(0, 2, 1, 3, 4).reshape(B, T, KV * G, D)


def _keys_values(pk, pv, ok, ov):
    """The prefix block broadcast over the batch and joined to the own block: k (B, KV, D, P+S), v (B, KV, P+S, D)."""
    B = ok.shape[0]
    k = jnp.concatenate([jnp.broadcast_to(pk[None], (B,) + pk.shape), ok], axis=1)
    v = jnp.concatenate([jnp.broadcast_to(pv[None], (B,) + pv.shape), ov], axis=1)
    return k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)


def _attention_probs(qg, k, bias):
    """Softmax over the keys of the scaled, masked scores, in float32, rounded to the queries' dtype.

    The mask is an additive bias (0 or `_NEG`, see `attention_bias`) rather than a
    `where` on a boolean mask: the same numbers (a score plus `_NEG` rounds to `_NEG`),
    but XLA:CPU runs the bias's add with the softmax 5x faster than the select
    (measured on the coder's 1.5 k x 3.2 k scores per KV head).
    """
    s = _dot32(qg, k) * (qg.shape[-1] ** -0.5) + bias[:, None]
    return jax.nn.softmax(s, axis=-1).astype(qg.dtype)


@jax.custom_vjp
def attention(
    q: jax.Array,
    pk: jax.Array,
    pv: jax.Array,
    ok: jax.Array,
    ov: jax.Array,
    bias: jax.Array,
) -> jax.Array:
    """Grouped-query attention over a shared prefix block and an own block.

    q: (B, T, H, D). pk, pv: (P, KV, D), shared by the batch.
    ok, ov: (B, S, KV, D). bias: (B, T*G, P + S) float32, 0 where a query may
    attend and `_NEG` where it may not (see `attention_bias`). Returns (B, T, H, D).

    The prefix is broadcast and concatenated to the own keys so that scores and
    outputs are one batched matmul each; query heads are folded next to the
    query positions, (B, KV, T*G, D). Measured on 2 CPU cores: separate
    products over the prefix and the own keys were 2.6x slower, and an earlier
    prototype found a 5-D einsum 2x slower than these plain batched matmuls.

    Its backward is written by hand (`_attention_bwd`); the forward is the same
    computation either way.
    """
    return _attention_fwd(q, pk, pv, ok, ov, bias)[0]


def _attention_fwd(q, pk, pv, ok, ov, bias):
    qg = _fold_queries(q, ok.shape[2])
    k, v = _keys_values(pk, pv, ok, ov)
    p = _attention_probs(qg, k, bias)
    out_g = _dot32(p, v).astype(p.dtype)
    # Only the probabilities (in the activations' dtype) are kept, not the float32 scores and
    # the softmax's intermediates: a 2.6 k-token prefix makes those ~300 MB per block and row.
    return _unfold_queries(out_g, q.shape[1]), (qg, pk, pv, ok, ov, p, out_g)


def _attention_bwd(res, g):
    """The attention's backward, cheaper than autodiff's by what it leaves out.

    - The probabilities come from the forward: no float32 scores are kept or rebuilt.
    - The softmax's backward is one pass, ds = p (dp - delta), where
      delta = sum_j p_j dp_j is taken as g . out over the head dimension
      instead of over every key (the same sum, by linearity).
    - The keys' and values' gradients are taken for the prefix and the own
      block separately, so when the prefix is a constant (a cache the
      adapter does not touch, as in the coder's training) XLA drops its
      products instead of computing (P + S)-wide ones and slicing them.

    Products run in the activations' dtype with float32 accumulation, as in
    `_mm32`'s rule. With autodiff, a boolean mask and `remat`, the coder's
    training step (2.6 k-token prefix, 510-token suffix) took 9.1 s; with this
    rule and `attention_bias`, 5.2 s, and 3.2-3.8 s with freed host memory
    kept (`jaxarena.host_memory`; `benchmarks/coder_tuning.py`). A query row
    that may see no key at all (which no caller reads) gets the softmax's gradient
    rather than zero.
    """
    qg, pk, pv, ok, ov, p, out_g = res
    B, T = g.shape[:2]
    P, KV, D = pk.shape
    dt = qg.dtype
    k, v = _keys_values(pk, pv, ok, ov)
    gg = _fold_queries(g.astype(dt), KV)  # (B, KV, T*G, D)
    dp = _dot32(gg, jnp.swapaxes(v, -1, -2))  # (B, KV, T*G, P+S)
    delta = jnp.sum(gg.astype(jnp.float32) * out_g.astype(jnp.float32), axis=-1, keepdims=True)
    ds = (p.astype(jnp.float32) * (dp - delta) * (D**-0.5)).astype(dt)
    dqg = _dot32(ds, jnp.swapaxes(k, -1, -2)).astype(dt)

    def key_grads(ds_part, p_part):
        """dK (B, KV, n, D) and dV (B, KV, n, D) of one block of keys."""
        return _dot32(jnp.swapaxes(ds_part, -1, -2), qg), _dot32(jnp.swapaxes(p_part, -1, -2), gg)

    dpk, dpv = key_grads(ds[..., :P], p[..., :P])
    dok, dov = key_grads(ds[..., P:], p[..., P:])
    # (B, KV, n, D) → the blocks' layouts: the prefix's summed over the batch that shared it.
    dpk, dpv = (x.sum(0).transpose(1, 0, 2).astype(pk.dtype) for x in (dpk, dpv))
    dok, dov = (x.transpose(0, 2, 1, 3).astype(ok.dtype) for x in (dok, dov))
    return _unfold_queries(dqg, T), dpk, dpv, dok, dov, None


attention.defvjp(_attention_fwd, _attention_bwd)


def attention_bias(p_valid: jax.Array, o_mask: jax.Array, n_groups: int) -> jax.Array:
    """Combine prefix validity (P,) and own mask (B, T, S) into an additive bias (B, T*G, P+S).

    0.0 where a query may attend, `_NEG` where it may not (float32). Rows are
    repeated per query head of a group, matching `attention`'s folding.
    Built once per forward, outside the layer loop.
    """
    B, T, _ = o_mask.shape
    pre = jnp.broadcast_to(p_valid[None, None, :], (B, T, p_valid.shape[0]))
    full = jnp.concatenate([pre, o_mask], axis=-1)
    return jnp.where(jnp.repeat(full, n_groups, axis=1), 0.0, _NEG).astype(jnp.float32)

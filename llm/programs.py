"""The jitted device programs of the embedded model: prefix cache, read, decode, option logits, sampling.

`generate.SmolLM2Generator` handles the host side (tokenizing, bucketing,
the prefix cache) and calls these. Each takes the model config (and other
static values) first, to be bound with `functools.partial` before `jax.jit`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import model as M


def nucleus_keep(probs: jax.Array, top_p) -> jax.Array:
    """Top-p's kept set over probabilities sorted descending on the last axis.

    A token is kept when the mass of the tokens strictly better than it is below
    top_p, so the best token is always kept. The generator's sampler draws from
    this set and the coder's GRPO takes its log-probs under it: one rule for both.
    """
    return jnp.cumsum(probs, axis=-1) - probs < top_p


def sample_token(logits: jax.Array, key: jax.Array, temperature, top_p, top_k: int) -> jax.Array:
    """Sample one token id from (V,) logits; temperature <= 0 means greedy.

    Order as Ollama's sampler: keep the top-k logits, divide by temperature,
    keep the smallest set whose probability reaches top_p (at least one token),
    then draw.
    """
    vals, idx = jax.lax.top_k(logits, top_k)  # sorted, descending
    t = jnp.maximum(temperature, 1e-6)
    scaled = vals / t
    probs = jax.nn.softmax(scaled)
    keep = nucleus_keep(probs, top_p)
    choice = jax.random.categorical(key, jnp.where(keep, scaled, -jnp.inf))
    # Select the position first and gather once: `where(t > 0, idx[choice], idx[0])`
    # made XLA:CPU replace the fast top-k by a full sort (0.26 s per call).
    return idx[jnp.where(temperature > 0, choice, 0)]


def sample_rows(logits, key_data, step, temperature, top_p, top_k: int):
    """Sample one token per row; row keys are folded with the step index."""
    keys = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    return jax.vmap(lambda lg, k: sample_token(lg, jax.random.fold_in(k, step), temperature, top_p, top_k))(
        logits, keys
    )


def read_program(cfg, top_k, max_new, params, pk, pv, p_valid, p_len, tokens, n_pad, key_data, temperature, top_p):
    """Read left-padded suffixes after the shared prefix and sample the first token.

    tokens: (B, S) int32, left-padded; n_pad: (B,) pad count per row.
    Returns (first token (B,), its logits (B, V) f32, own_k, own_v) where the own
    caches have S + max_new - 1 slots: the suffix, then the tokens fed back.
    """
    B, S = tokens.shape
    own_len = S + max_new - 1
    slots = jnp.arange(own_len)
    own_valid = slots[None, :] >= n_pad[:, None]  # (B, own_len)
    positions = jnp.maximum(p_len + jnp.arange(S)[None, :] - n_pad[:, None], 0)
    causal = jnp.arange(S)[:, None] >= slots[None, :]
    o_mask = causal[None] & own_valid[:, None, :]
    kv_zero = jnp.zeros((B, own_len, cfg.n_kv_heads, cfg.head_dim), params["embed"].dtype)
    own = (kv_zero,) * cfg.n_layers
    x, own_k, own_v = M.layers_forward(
        cfg, params, M.embed(params, tokens), positions, pk, pv, p_valid, o_mask, own, own, 0
    )
    logits = M.lm_head(cfg, params, x[:, -1])
    return sample_rows(logits, key_data, 0, temperature, top_p, top_k), logits, own_k, own_v


def decode_program(
    cfg, top_k, params, pk, pv, p_valid, n_pad, own_k, own_v, tok, slot, positions, step, key_data, temperature, top_p
):
    """Feed back one token per row and sample the next.

    tok: (B,) last sampled tokens, written at own slot `slot` with RoPE
    `positions` (B,). Returns (next token (B,), own_k, own_v).

    Kept as its own jitted program: fused into the read program (by scan or by
    unrolling) the two decode steps cost 3-5x more on XLA:CPU than as
    separate calls.
    """
    own_len = own_k[0].shape[1]
    slots = jnp.arange(own_len)
    mask = ((slots[None, :] >= n_pad[:, None]) & (slots[None, :] <= slot))[:, None, :]
    x, own_k, own_v = M.layers_forward(
        cfg, params, M.embed(params, tok[:, None]), positions[:, None], pk, pv, p_valid, mask, own_k, own_v, slot
    )
    logits = M.lm_head(cfg, params, x[:, 0])
    return sample_rows(logits, key_data, step, temperature, top_p, top_k), own_k, own_v


def prefix_program(cfg, params, tokens, valid):
    """KV cache of one right-padded prefix: (k, v), tuples of (P, KV, D) per layer."""
    P = tokens.shape[1]
    pk, pv, p_valid = M.empty_prefix(cfg, params["embed"].dtype)
    o_mask = jnp.tril(jnp.ones((P, P), bool))[None] & valid[:, None, :]
    positions = jnp.arange(P)[None, :]
    _, k, v = M.layers_forward(cfg, params, M.embed(params, tokens), positions, pk, pv, p_valid, o_mask)
    return tuple(x[0] for x in k), tuple(x[0] for x in v)


def option_logits_program(cfg, params, pk, pv, p_valid, p_len, tokens, n_pad, option_ids):
    """Next-token logits of the option tokens only, (B, K) float32, after left-padded suffixes.

    The same forward pass as `read_program` over the suffix (the reply's
    first position), without sampling or the caches that decoding needs.
    """
    B, S = tokens.shape
    slots = jnp.arange(S)
    own_valid = slots[None, :] >= n_pad[:, None]
    positions = jnp.maximum(p_len + jnp.arange(S)[None, :] - n_pad[:, None], 0)
    o_mask = (jnp.arange(S)[:, None] >= slots[None, :])[None] & own_valid[:, None, :]
    kv_zero = jnp.zeros((B, S, cfg.n_kv_heads, cfg.head_dim), params["embed"].dtype)
    own = (kv_zero,) * cfg.n_layers
    x, _, _ = M.layers_forward(cfg, params, M.embed(params, tokens), positions, pk, pv, p_valid, o_mask, own, own, 0)
    logits = M.lm_head(cfg, params, x[:, -1])
    return logits[:, option_ids].astype(jnp.float32)

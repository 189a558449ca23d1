"""SFT, DPO and GRPO losses over the model's 4-way tag choice.

The tag model answers by choice decoding: its reply is a distribution over
the four option tokens "0".."3" (`choice`). Every loss here is therefore a
function of the (M, 4) option logits, renormalised over those options, not of
free text:

- `sft_loss`: KL(softmax(Q / tau) || p), distillation of the oracle's values.
  Soft targets, not cross-entropy on the argmax: with K playouts per tag ties
  are common (every tag wins, or none does) and the argmax of a tie is noise;
  the soft target keeps the tie as a tie. `tau -> 0` recovers cross-entropy
  on the best tag (`sft_argmax_loss`).
- `dpo_loss`: Direct Preference Optimization on (better, worse) tag pairs,
  with the reference model's log-probs over the same four options.
- `grpo_loss`: Group Relative Policy Optimization. For each state, G tags are
  drawn from the model and played out; advantages are the group-normalised
  rewards (`group_advantages`), the policy ratio is clipped as in PPO, and the
  KL to the reference is the exact sum over the four options (no estimator).

All take and return float32 and mask rows with `weight` (1 keeps a row, 0 drops it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def option_log_probs(logits: jax.Array) -> jax.Array:
    """log p over the options, (M, 4), from (M, 4) option logits."""
    return jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)


def _mean(x: jax.Array, weight: jax.Array | None) -> jax.Array:
    if weight is None:
        return jnp.mean(x)
    w = weight.astype(jnp.float32)
    return jnp.sum(x * w) / jnp.maximum(jnp.sum(w), 1.0)


def soft_targets(q: jax.Array, tau: float) -> jax.Array:
    """softmax(Q / tau) over the options: the SFT target for values `q` (M, 4)."""
    return jax.nn.softmax(q.astype(jnp.float32) / tau, axis=-1)


def sft_loss(logits: jax.Array, q: jax.Array, tau: float, weight: jax.Array | None = None) -> jax.Array:
    """Mean KL(softmax(q / tau) || softmax(logits)) over rows."""
    target = soft_targets(q, tau)
    logp = option_log_probs(logits)
    kl = jnp.sum(target * (jnp.log(jnp.maximum(target, 1e-30)) - logp), axis=-1)
    return _mean(kl, weight)


def sft_argmax_loss(logits: jax.Array, best: jax.Array, weight: jax.Array | None = None) -> jax.Array:
    """Mean cross-entropy on the best tag `best` (M,)."""
    logp = option_log_probs(logits)
    return _mean(-jnp.take_along_axis(logp, best[:, None], axis=-1)[:, 0], weight)


def dpo_loss(
    logits: jax.Array,
    ref_logits: jax.Array,
    better: jax.Array,
    worse: jax.Array,
    beta: float,
    weight: jax.Array | None = None,
) -> jax.Array:
    """Mean -log sigmoid(beta * [(log p(better) - log p_ref(better)) - (log p(worse) - log p_ref(worse))])."""
    logp, ref = option_log_probs(logits), option_log_probs(jax.lax.stop_gradient(ref_logits))

    def pick(x, i):
        return jnp.take_along_axis(x, i[:, None], axis=-1)[:, 0]

    margin = (pick(logp, better) - pick(ref, better)) - (pick(logp, worse) - pick(ref, worse))
    return _mean(-jax.nn.log_sigmoid(beta * margin), weight)


def group_advantages(rewards: jax.Array, eps: float = 1e-6) -> jax.Array:
    """(r - mean) / (std + eps) within each group: rewards (M, G) -> advantages (M, G).

    A group whose G rewards are all equal (every sampled tag won) has zero
    advantage: it says nothing about which tag is better.
    """
    r = rewards.astype(jnp.float32)
    mean = r.mean(axis=-1, keepdims=True)
    std = r.std(axis=-1, keepdims=True)
    return (r - mean) / (std + eps)


def exact_kl(logits: jax.Array, ref_logits: jax.Array) -> jax.Array:
    """KL(p || p_ref) over the four options, (M,)."""
    logp, ref = option_log_probs(logits), option_log_probs(jax.lax.stop_gradient(ref_logits))
    return jnp.sum(jnp.exp(logp) * (logp - ref), axis=-1)


def grpo_loss(
    logits: jax.Array,
    old_logits: jax.Array,
    ref_logits: jax.Array,
    tags: jax.Array,
    advantages: jax.Array,
    *,
    clip_eps: float,
    kl_coef: float,
    weight: jax.Array | None = None,
) -> tuple[jax.Array, dict]:
    """The clipped GRPO objective, negated for minimisation; returns (loss, stats).

    logits, old_logits, ref_logits: (M, 4) for the current, sampling and
    reference models; tags, advantages: (M, G) sampled tags and their
    group-relative advantages. The surrogate is averaged over the G samples
    of each state, then over states; the KL term is exact per state.
    """
    logp = option_log_probs(logits)
    old = option_log_probs(jax.lax.stop_gradient(old_logits))
    lp = jnp.take_along_axis(logp, tags, axis=-1)
    lp_old = jnp.take_along_axis(old, tags, axis=-1)
    ratio = jnp.exp(lp - lp_old)
    surrogate = jnp.minimum(ratio * advantages, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * advantages)
    kl = exact_kl(logits, ref_logits)
    per_state = -surrogate.mean(axis=-1) + kl_coef * kl
    stats = {"kl": _mean(kl, weight), "clip_frac": _mean(jnp.mean(jnp.abs(ratio - 1) > clip_eps, -1), weight)}
    return _mean(per_state, weight), stats

"""PPO's objective, shared by every learner of the one PPO core (`algorithms.ppo_core`): GAE, the
clipped loss (over live samples where a mask is given), and the float hyper-parameters a runner
state carries (`hyper_of`)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import distrax
import jax
import jax.numpy as jnp

from .arena_knobs import ARENA_PREFIX
from .config import SWEEPABLE


class Transition(NamedTuple):
    """One rollout step; leaves lead with (num_envs,) or, with several agents per env (the arena's
    5 NPCs), (num_envs, agents). `obs` may be any pytree."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    next_value: jax.Array  # V(s_{t+1}); at an episode's last step V(final_obs), before auto-reset
    cut: jax.Array  # no bootstrap: episode terminated or this NPC died
    end: jax.Array  # trajectory ends here: any done, or this NPC died
    mask: jax.Array | None  # NPC alive at the start of the step; None: every sample counts


def calculate_gae(rewards, values, next_values, cut, end, gamma: float, gae_lambda: float):
    """Generalised advantage estimation over a time-major batch (axis 0 = time).

    Args:
        rewards, values: (T, ...) r_t and V(s_t).
        next_values: (T, ...) V(s_{t+1}) of the state the step reached, before
            any auto-reset; at a truncated (timeout) step this is V(final_obs),
            so the timeout bootstraps instead of being treated as terminal.
        cut: (T, ...) bool, true where s_{t+1} is terminal (no bootstrap).
        end: (T, ...) bool, true where the trajectory ends after step t
            (terminated, truncated, or the agent died): the advantage does not
            chain into step t+1, which belongs to another episode.
    Returns:
        (advantages, targets), both (T, ...); targets = advantages + values.
    """
    not_cut = 1.0 - cut.astype(jnp.float32)
    not_end = 1.0 - end.astype(jnp.float32)
    deltas = rewards + gamma * next_values * not_cut - values

    def _backward(gae, xs):
        delta, cont = xs
        gae = delta + gamma * gae_lambda * cont * gae
        return gae, gae

    _, advantages = jax.lax.scan(_backward, jnp.zeros_like(deltas[0]), (deltas, not_end), reverse=True)
    return advantages, advantages + values


def masked_mean(x, mask):
    """Mean of x over entries where mask is true (0 if there are none); mask None: the plain mean."""
    if mask is None:
        return jnp.mean(x)
    m = mask.astype(x.dtype)
    return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def hyper_of(config) -> dict[str, jax.Array]:
    """The float hyper-parameters (`SWEEPABLE`) a `PPOConfig` or `CoreConfig` has, as () float32 arrays;
    a constant entropy coefficient (`ent_coef_end` None) anneals from `ent_coef` to itself."""
    fields = {f.name for f in dataclasses.fields(config)}
    values = {name: getattr(config, name) for name in SWEEPABLE if name in fields}
    if values["ent_coef_end"] is None:
        values["ent_coef_end"] = values["ent_coef"]
    # The arena knobs a run sets (`PPOConfig.arena`) travel the same way, as "arena.NAME".
    values.update({f"{ARENA_PREFIX}{name}": value for name, value in getattr(config, "arena", ())})
    return {name: jnp.float32(value) for name, value in values.items()}


def policy_and_value(network, params, obs, floor: bool = False):
    """(pi, value) of a network whose `apply` gives (a `distrax.Categorical` or its logits, value).

    `floor` raises a masked action's logit of -inf to -1e9: its entropy gradient would be NaN
    (0 * inf), a huge finite one's is 0. A network's own Categorical is used as it is.
    """
    head, value = network.apply(params, obs)
    if isinstance(head, distrax.Categorical):
        return head, value
    return distrax.Categorical(logits=jnp.maximum(head, -1e9) if floor else head), value


def _live(x, mask):
    return x if mask is None else jnp.where(mask, x, 0.0)


def ppo_loss(network, config, params, batch: Transition, adv, tgt, ent_coef=None, hyper=None):
    """Clipped PPO loss over a flat batch of samples; returns (total, aux).

    `config` (a `PPOConfig` or `CoreConfig`) gives `ent_target` and the defaults; `ent_coef`
    overrides `config.ent_coef` (the trainer passes the annealed value); `hyper` (`hyper_of`)
    gives the clip range and the value coefficient as traced values.

    With a `batch.mask` (the arena: NPCs alive at the step's start) every term is a mean over the
    masked samples, so dead NPCs' transitions contribute nothing, not even to the advantage
    normalisation. Masked actions' logits are floored (`policy_and_value`).
    """
    clip_eps = config.clip_eps if hyper is None else hyper["clip_eps"]
    vf_coef = config.vf_coef if hyper is None else hyper["vf_coef"]
    pi, value = policy_and_value(network, params, batch.obs, floor=True)
    log_prob = pi.log_prob(batch.action)
    mask = batch.mask
    # Value loss, clipped around the rollout's estimate.
    v_clipped = batch.value + jnp.clip(value - batch.value, -clip_eps, clip_eps)
    v_loss = 0.5 * masked_mean(jnp.maximum((value - tgt) ** 2, (v_clipped - tgt) ** 2), mask)
    # Clipped surrogate; advantages normalised over the live samples only.
    mu = masked_mean(adv, mask)
    sd = jnp.sqrt(masked_mean((adv - mu) ** 2, mask))
    adv = _live((adv - mu) / (sd + 1e-8), mask)
    log_ratio = _live(log_prob - batch.log_prob, mask)
    ratio = jnp.exp(log_ratio)
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    actor_loss = -masked_mean(surrogate, mask)
    entropy = masked_mean(pi.entropy(), mask)
    ent_coef = config.ent_coef if ent_coef is None else ent_coef
    # With a target H*, -|H - H*| replaces H: the same push up below H*, and a push down above it.
    ent_term = entropy if config.ent_target is None else -jnp.abs(entropy - config.ent_target)
    total = actor_loss + vf_coef * v_loss - ent_coef * ent_term
    aux = {
        "value_loss": v_loss,
        "actor_loss": actor_loss,
        "entropy": entropy,
        "approx_kl": masked_mean((ratio - 1.0) - log_ratio, mask),
        "clip_frac": masked_mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32), mask),
    }
    return total, aux

"""Online GRPO for the tag model: the model plays, the game scores, the adapter learns, in one jitted program.

One step (`make_grpo_step`), compiled once:

1. *Rollout.* The squad plays `episodes` episodes with its tags from the
   tag model under the current adapter (the in-graph LLM, `GraphTagSource`),
   recording every decision state.
2. *States.* `states` of the decisions actually made are drawn uniformly
   (fixed count, static shape).
3. *Group.* For each state, `group` tags are drawn from the model's 4-way
   distribution (its option logits at `sample_temperature`), and each is
   played out from that state with the tag held, through the same runner
   (`Start`), to the episode's end: the reward is 1 for a win, else 0.
4. *Update.* Group-relative advantages, the clipped ratio against the
   sampling model and the exact KL to the base model over the four options
   (`losses.grpo_loss`); `inner_steps` Adam steps on the same group.

Nothing leaves the device between the rollout, the playouts and the update.
The bot of each step is drawn from `bots` (one compiled program serves all:
the bot is an `EnvParams` value).
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import optax

from jaxarena.analysis.oracle import pricing_params
from jaxarena.names import NPC_WIN, NUM_TAGS
from jaxarena.runner import Start, make_runner
from jaxarena.tag_sources import hold_tags

from . import losses
from .model import TagModel, option_logits


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    """Sizes and coefficients of one GRPO step; see the module docstring."""

    episodes: int = 32
    states: int = 32
    group: int = 8
    inner_steps: int = 2
    clip_eps: float = 0.2
    kl_coef: float = 0.02
    sample_temperature: float = 1.0
    lr: float = 1e-3

    def __post_init__(self):
        for name in ("episodes", "states", "group", "inner_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group < 2:
            raise ValueError("group must be >= 2: advantages are relative within a group")


def make_grpo_update(model: TagModel, config: GRPOConfig, optimizer):
    """`update(adapter, opt_state, base, features, tags, rewards) -> (adapter, opt_state, stats)`, traceable.

    The GRPO update on one batch of groups, apart from where the rewards come
    from: features (M, 5), the sampled tags (M, G) and their rewards (M, G).
    The sampling model is `adapter` as given; the reference is the base model.
    """
    logits_of = partial(option_logits, model.source, model.lora)

    def update(adapter, opt_state, base, features, tags, rewards):
        old_logits = jax.lax.stop_gradient(logits_of(base, adapter, features))
        ref_logits = jax.lax.stop_gradient(logits_of(base, None, features))
        advantages = losses.group_advantages(rewards)

        def loss_fn(ad):
            return losses.grpo_loss(
                logits_of(base, ad, features),
                old_logits,
                ref_logits,
                tags,
                advantages,
                clip_eps=config.clip_eps,
                kl_coef=config.kl_coef,
            )

        def inner(carry, _):
            ad, opt = carry
            (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(ad)
            updates, opt = optimizer.update(grads, opt, ad)
            return (optax.apply_updates(ad, updates), opt), (loss, stats)

        (adapter, opt_state), (loss, stats) = jax.lax.scan(inner, (adapter, opt_state), None, config.inner_steps)
        return adapter, opt_state, {"loss": loss[-1], "kl": stats["kl"][-1], "clip_frac": stats["clip_frac"][-1]}

    return update


def sample_group(model: TagModel, base, adapter, features, key, config: GRPOConfig) -> jax.Array:
    """(M, G) tags drawn from the model's 4-way distribution at `sample_temperature`."""
    logits = jax.lax.stop_gradient(option_logits(model.source, model.lora, base, adapter, features))
    shape = (features.shape[0], config.group)
    return jax.random.categorical(key, logits[:, None, :] / config.sample_temperature, axis=-1, shape=shape)


def make_grpo_step(env, env_params, policy, model: TagModel, config: GRPOConfig):
    """A jitted `step(adapter, opt_state, base, policy_params, params, key) -> (adapter, opt_state, stats)`.

    `params` may be another bot's `EnvParams` of the same shapes (no recompile).
    """
    source = model.source
    play = make_runner(env, env_params, policy, source.tag_fn(), config.episodes, record_states=True)
    lanes = config.states * config.group
    playout = make_runner(env, env_params, policy, hold_tags, lanes)
    optimizer = optax.adam(config.lr)
    update = make_grpo_update(model, config, optimizer)

    def step(adapter, opt_state, base, policy_params, params, key):
        k_play, k_pick, k_tags, k_out = jax.random.split(key, 4)
        tag_state = {"arrays": source.arrays_with(base, adapter, model.lora), "cache": source.init_cache()}
        result = play(policy_params, params, k_play, tag_state=tag_state)
        # Draw decision states among the decisions really made (ended lanes have zero weight).
        active = result.decision_active.reshape(-1)
        flat = jax.random.choice(k_pick, active.shape[0], (config.states,), p=active / jnp.maximum(active.sum(), 1))
        states = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[flat], result.decision_states)
        features = result.decision_features.reshape(-1, result.decision_features.shape[-1])[flat]
        tags = sample_group(model, base, adapter, features, k_tags, config).astype(jnp.int32)
        # Each sampled tag is held from its state to the episode's end; the reward is the win.
        branched = jax.tree.map(lambda x: jnp.repeat(x, config.group, axis=0), states)
        out = playout(policy_params, pricing_params(params), k_out, tags.reshape(-1), Start(branched, jnp.int32(0)))
        rewards = (out.outcome == NPC_WIN).astype(jnp.float32).reshape(config.states, config.group)
        adapter, opt_state, stats = update(adapter, opt_state, base, features, tags, rewards)
        stats |= {
            "reward": rewards.mean(),
            "informative_groups": jnp.mean(rewards.std(-1) > 0),
            "rollout_win": jnp.mean(result.outcome == NPC_WIN),
            "sampled_tag_shares": jnp.bincount(tags.reshape(-1), length=NUM_TAGS) / lanes,
        }
        return adapter, opt_state, stats

    return jax.jit(step), optimizer

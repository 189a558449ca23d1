"""PPO for any batched, auto-resetting, single-learner environment, PureJaxRL-style.

`algorithms.ppo` trains the arena's shared NPC policy, with its five-agent
masking and per-bot metrics. The learners of Combination C are simpler: the RL
selector acts once per 5 s decision, and the RL-trained bot once per tick, each
one agent per environment. They share this core:

    trainer = make_core_trainer(env, network, CoreConfig(num_envs=64))
    state = trainer.init(jax.random.PRNGKey(0))
    state, metrics = jax.jit(trainer.run_updates, static_argnums=1)(state, 10)

`env` is any object with `reset(key) -> (obs, env_state)` and
`step(key, env_state, action (num_envs,) int32) -> (obs, env_state, reward
(num_envs,), done (num_envs,), info)`, batched over `num_envs` and resetting
finished episodes itself; `obs` may be any pytree with a leading num_envs axis.
`network.apply(params, obs) -> (logits (B, A), value (B,))`; an invalid action
is masked by a logit of -inf. An episode's end is terminal (no bootstrap): in
the arena a timeout ends the game too.

Metrics are per update: the losses, the mean reward per step, and the mean of
every `info` entry over the episodes that ended in the update (NaN if none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import distrax
import jax
import jax.numpy as jnp
import optax
from flax import struct
from flax.training.train_state import TrainState

from .ppo_objective import calculate_gae


@dataclasses.dataclass(frozen=True)
class CoreConfig:
    num_envs: int = 64
    num_steps: int = 32  # env steps per environment between updates
    update_epochs: int = 4
    num_minibatches: int = 4
    lr: float = 3e-4
    anneal_lr: bool = True
    total_updates: int = 100  # for the learning-rate schedule
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5

    def __post_init__(self):
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "total_updates"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if (self.num_envs * self.num_steps) % self.num_minibatches:
            raise ValueError(
                f"num_envs * num_steps = {self.num_envs * self.num_steps} must divide into "
                f"num_minibatches = {self.num_minibatches}"
            )
        if not 0.0 < self.lr:
            raise ValueError(f"lr must be positive, got {self.lr}")

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps


@struct.dataclass
class CoreState:
    train_state: TrainState
    env_state: Any
    obs: Any
    rng: jax.Array
    update: jax.Array  # () int32


class CoreTransition(NamedTuple):
    obs: Any
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    done: jax.Array
    info: dict


class CoreTrainer(NamedTuple):
    config: CoreConfig
    network: Any
    init: Callable[[jax.Array], CoreState]
    run_updates: Callable[[CoreState, int], tuple[CoreState, dict]]


def clipped_ppo_loss(network, config: CoreConfig, params, batch: CoreTransition, adv, tgt):
    """The clipped PPO objective over a flat batch; returns (total, aux)."""
    logits, value = network.apply(params, batch.obs)
    # A masked action's -inf logit has a NaN entropy gradient (0 * inf); a huge finite one has none.
    pi = distrax.Categorical(logits=jnp.maximum(logits, -1e9))
    log_prob = pi.log_prob(batch.action)
    v_clipped = batch.value + jnp.clip(value - batch.value, -config.clip_eps, config.clip_eps)
    v_loss = 0.5 * jnp.mean(jnp.maximum((value - tgt) ** 2, (v_clipped - tgt) ** 2))
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    log_ratio = log_prob - batch.log_prob
    ratio = jnp.exp(log_ratio)
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - config.clip_eps, 1 + config.clip_eps) * adv)
    actor_loss = -jnp.mean(surrogate)
    entropy = jnp.mean(pi.entropy())
    total = actor_loss + config.vf_coef * v_loss - config.ent_coef * entropy
    aux = {
        "value_loss": v_loss,
        "actor_loss": actor_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
    }
    return total, aux


def make_core_trainer(env, network, config: CoreConfig, params=None) -> CoreTrainer:
    """The init / run_updates pair of a PPO run on `env` (see the module docstring).

    `params` starts from given network parameters (e.g. a checkpoint) instead of a fresh init.
    """

    def _schedule(count):
        grad_steps = config.update_epochs * config.num_minibatches
        frac = 1.0 - jnp.minimum(count // grad_steps, config.total_updates) / config.total_updates
        return config.lr * frac

    tx = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(_schedule if config.anneal_lr else config.lr, eps=1e-5),
    )

    def init(rng: jax.Array) -> CoreState:
        rng, k_env, k_net = jax.random.split(rng, 3)
        obs, env_state = env.reset(k_env)
        first = jax.tree.map(lambda x: x[:1], obs)
        net_params = network.init(k_net, first) if params is None else params
        train_state = TrainState.create(apply_fn=network.apply, params=net_params, tx=tx)
        return CoreState(train_state, env_state, obs, rng, jnp.int32(0))

    def _update(state: CoreState, _):
        def _env_step(carry, _):
            env_state, obs, rng = carry
            rng, k_act, k_env = jax.random.split(rng, 3)
            logits, value = network.apply(state.train_state.params, obs)
            pi = distrax.Categorical(logits=logits)
            action = pi.sample(seed=k_act)
            next_obs, env_state, reward, done, info = env.step(k_env, env_state, action)
            step = CoreTransition(obs, action, pi.log_prob(action), value, reward, done, info)
            return (env_state, next_obs, rng), step

        (env_state, obs, rng), traj = jax.lax.scan(
            _env_step, (state.env_state, state.obs, state.rng), None, config.num_steps
        )
        _, last_value = network.apply(state.train_state.params, obs)
        next_values = jnp.concatenate([traj.value[1:], last_value[None]])
        advantages, targets = calculate_gae(
            traj.reward, traj.value, next_values, traj.done, traj.done, config.gamma, config.gae_lambda
        )
        loss_fn = lambda p, b, a, t: clipped_ppo_loss(network, config, p, b, a, t)  # noqa: E731

        def _epoch(carry, _):
            train_state, rng = carry
            rng, k_perm = jax.random.split(rng)
            flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), (traj, advantages, targets))
            perm = jax.random.permutation(k_perm, config.steps_per_update)
            shuffled = jax.tree.map(lambda x: x[perm].reshape((config.num_minibatches, -1) + x.shape[1:]), flat)

            def _minibatch(train_state, minibatch):
                batch, adv, tgt = minibatch
                (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(train_state.params, batch, adv, tgt)
                return train_state.apply_gradients(grads=grads), dict(aux, total_loss=loss)

            train_state, losses = jax.lax.scan(_minibatch, train_state, shuffled)
            return (train_state, rng), losses

        (train_state, rng), losses = jax.lax.scan(_epoch, (state.train_state, rng), None, config.update_epochs)
        ended = traj.done.astype(jnp.float32)
        n_ended = jnp.sum(ended)
        metrics = {k: jnp.mean(v) for k, v in losses.items()}
        metrics["reward_mean"] = jnp.mean(traj.reward)
        metrics["episodes"] = n_ended
        for name, value in traj.info.items():
            total = jnp.sum(jnp.asarray(value, jnp.float32) * ended)
            metrics[name] = jnp.where(n_ended > 0, total / jnp.maximum(n_ended, 1.0), jnp.nan)
        update = state.update + 1
        metrics["update"] = update
        return CoreState(train_state, env_state, obs, rng, update), metrics

    def run_updates(state: CoreState, n: int):
        return jax.lax.scan(_update, state, None, n)

    return CoreTrainer(config, network, init, run_updates)

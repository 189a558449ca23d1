"""PPO for the arena's shared NPC policy, PureJaxRL-style, fully jitted.

    from jaxarena.algorithms import PPOConfig, make_train
    train = make_train(PPOConfig(combination="A", total_timesteps=2_000_000))
    runner_state, metrics = jax.jit(train)(jax.random.PRNGKey(0))

`train` also takes a batch of keys and trains one run per key in the same
compiled program (`jax.vmap` over seeds, as PureJaxRL does):

    runner_states, metrics = jax.jit(make_train(config))(jax.random.split(key, 8))  # leaves (8, ...)

For checkpointed runs use `make_trainer(config)`, whose `init(rng)` and
`run_updates(runner_state, n)` split the same computation into chunks: the
scan over updates is the same, so running 2n updates at once or n, saving,
restoring and n more gives identical parameters. The float hyper-parameters
that change no shape (`SWEEPABLE`: lr, ent_coef, gamma, ...) travel in the
runner state (`RunnerState.hyper`), so runs that differ only in them share one
program too (`jaxarena.algorithms.multi_run`).

Batch layout: `num_envs` arenas (vmapped; sharded over devices when a mesh is
given) x 5 NPCs. The policy is shared, so the (envs x NPCs) axes are
flattened into one batch of agent samples for the update. Transitions of NPCs
dead at the start of a step (info["alive"] False) are masked out of every
loss term.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from flax.training.train_state import TrainState
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxarena
from jaxarena.names import BOT_TYPES, BOT_WIN, NPC_WIN, TIMEOUT
from jaxarena.observe import OWN_HP
from jaxarena.wrappers import LogState, LogWrapper

from .config import RECIPES, PPOConfig
from .networks import ActorCritic, expert_mask
from .ppo_objective import Transition, calculate_gae, hyper_of, masked_mean, ppo_loss

ENV_AXIS = "env"


@struct.dataclass
class RunnerState:
    """Everything a run carries between updates (and what a checkpoint holds)."""

    train_state: TrainState
    log_state: LogState  # the arenas and their running episode returns, batched over envs: leaves (num_envs, ...)
    obs: jax.Array  # (num_envs, 5, obs_size) float32, the current observation
    rng: jax.Array  # (2,) uint32 raw PRNG key (raw, so orbax stores it plainly)
    update: jax.Array  # () int32, updates done so far
    # The float hyper-parameters (`SWEEPABLE`) as () float32 arrays: values, not constants of the program,
    # so runs that differ only in them are one vmapped program (and a checkpoint records them).
    hyper: dict


class Trainer(NamedTuple):
    """The pieces of one training run; see `make_trainer`."""

    config: PPOConfig
    network: ActorCritic
    init: Callable[[jax.Array], RunnerState]
    run_updates: Callable[[RunnerState, int], tuple[RunnerState, dict]]
    mesh: Mesh | None


def bot_types_for(config: PPOConfig) -> jax.Array:
    """(num_envs,) int32 bot type of each env slot: bots dealt round-robin."""
    ids = jnp.asarray([BOT_TYPES.index(b) for b in config.bots], jnp.int32)
    return ids[jnp.arange(config.num_envs) % len(config.bots)]


def default_mesh(num_envs: int) -> Mesh | None:
    """A 1-D mesh over all visible devices, or None on one device.

    Falls back to None (with the batch on one device) when the env count
    does not split evenly.
    """
    devices = jax.devices()
    if len(devices) < 2 or num_envs % len(devices):
        return None
    return Mesh(devices, (ENV_AXIS,))


def _minibatches(x: jax.Array, perm: jax.Array, num_minibatches: int, mesh: Mesh | None) -> jax.Array:
    """`x` (samples, ...) shuffled by `perm` into (num_minibatches, samples per minibatch, ...).

    With a mesh each minibatch's samples are split over its devices, so each device computes the
    loss and gradient of its share and XLA all-reduces the sums; unconstrained, the partitioner
    would run every minibatch step whole on every device. Which samples form a minibatch does not
    change, so the update equals one device's up to the order of float sums.
    """
    x = x[perm].reshape((num_minibatches, -1) + x.shape[1:])
    if mesh is None or x.shape[1] % mesh.size:
        return x
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(None, ENV_AXIS, *([None] * (x.ndim - 2)))))


def make_trainer(config: PPOConfig, mesh: Mesh | None | str = "auto") -> Trainer:
    """Build `init(rng) -> RunnerState` and `run_updates(state, n) -> (state, metrics)`.

    Both are pure and jittable (`run_updates` with `n` static). `mesh`:
    "auto" shards the env batch over all visible devices (see
    `default_mesh`), None keeps one device, or pass a 1-D `Mesh` whose axis
    is named "env". Metrics come back stacked over the n updates; see
    `_update_step` for the keys.
    """
    if isinstance(mesh, str):
        mesh = default_mesh(config.num_envs)
    arena, base_params = jaxarena.make(
        config.env_id,
        scenario=config.scenario,
        shaping_weight=config.effective_shaping_weight,
        shaping_recipe=RECIPES.index(config.recipe),
    )
    env = LogWrapper(arena)  # episode returns, lengths and outcomes for the metrics
    network = ActorCritic(**config.network_kwargs())
    bot_types = bot_types_for(config)
    n_envs, n_steps = config.num_envs, config.num_steps
    n_grad_steps = config.anneal_grad_steps  # the anneals' length, the run's own unless anneal_steps says

    def _env_params(bot_type):
        return base_params.replace(bot_type=bot_type)

    v_reset = jax.vmap(lambda k, bt: env.reset(k, _env_params(bt)))
    v_step = jax.vmap(lambda k, s, a, bt: env.step(k, s, a, _env_params(bt)))
    v_retag = jax.vmap(lambda o, s, t, bt: env.retag(o, s, t, _env_params(bt)))

    def _shard_env(x):
        """Keep env-axis arrays split over the mesh (a no-op on one device)."""
        if mesh is None:
            return x
        spec = P(ENV_AXIS, *([None] * (x.ndim - 1)))
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

    def _redraw_tags(key, obs, state):
        """Recipe B: a uniform new tag every tag period (incl. t = 0 after a reset)."""
        if config.combination != "B":
            return obs, state
        # With the default tags (0..3) this indexes an identity table: the same draws as randint(0, 4).
        pick = jax.random.randint(key, (n_envs,), 0, len(config.tags), dtype=jnp.int32)
        new = jnp.asarray(config.tags, jnp.int32)[pick]
        arena = state.env_state
        obs, state = v_retag(obs, state, jnp.where(arena.t % config.tag_period_ticks == 0, new, arena.tag), bot_types)
        return obs, state

    # Adam's moments alone are the optimiser's state; the clip norm and the annealed learning rate are
    # applied in `_apply_gradients` from the runner's `hyper`, so they may differ between vmapped runs.
    tx = optax.scale_by_adam(eps=1e-5)

    def init(rng: jax.Array, hyper: dict | None = None) -> RunnerState:
        """A fresh run from `rng`, with `hyper` (default: the config's, `hyper_of`)."""
        rng = jnp.asarray(rng)
        if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
            rng = jax.random.key_data(rng)
        rng, k_net, k_env, k_tag = jax.random.split(rng, 4)
        params = network.init(k_net, jnp.zeros((1, env.obs_size), jnp.float32))
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        obs, log_state = v_reset(jax.random.split(k_env, n_envs), bot_types)
        obs, log_state = _redraw_tags(k_tag, obs, log_state)
        return RunnerState(
            train_state=train_state,
            log_state=jax.tree.map(_shard_env, log_state),
            obs=_shard_env(obs),
            rng=rng,
            update=jnp.int32(0),
            hyper=hyper_of(config) if hyper is None else {k: jnp.float32(v) for k, v in hyper.items()},
        )

    def _apply_gradients(train_state: TrainState, grads, hyper: dict) -> TrainState:
        """One Adam step: frozen experts' gradients zeroed, the global norm clipped, lr annealed to 0."""
        if config.frozen_tags:  # a zero gradient leaves Adam's moments, and so the weights, exactly as they were
            frozen = expert_mask(grads, config.frozen_tags)
            grads = jax.tree.map(lambda g, f: jnp.zeros_like(g) if f else g, grads, frozen)
        norm = optax.tree.norm(grads)
        scale = jnp.where(norm < hyper["max_grad_norm"], 1.0, hyper["max_grad_norm"] / norm)
        grads = jax.tree.map(lambda g: g * scale, grads)
        updates, opt_state = tx.update(grads, train_state.opt_state, train_state.params)
        lr = hyper["lr"]
        if config.anneal_lr:  # linear to 0 over `anneal_grad_steps`, then 0
            lr = lr * (1.0 - jnp.minimum(train_state.step, n_grad_steps) / n_grad_steps)
        params = optax.apply_updates(train_state.params, jax.tree.map(lambda u: -lr * u, updates))
        return train_state.replace(step=train_state.step + 1, params=params, opt_state=opt_state)

    def _update_step(runner: RunnerState, _):

        # ---- rollout ------------------------------------------------------
        def _env_step(carry, _):
            train_state, log_state, obs, rng = carry
            rng, k_act, k_step, k_tag = jax.random.split(rng, 4)
            pi, value = network.apply(train_state.params, obs)
            action = pi.sample(seed=k_act)
            log_prob = pi.log_prob(action)
            next_obs, log_state, reward, done, info = v_step(
                jax.random.split(k_step, n_envs), log_state, action, bot_types
            )
            next_obs, log_state = _redraw_tags(k_tag, next_obs, log_state)
            # V of the state reached, before auto-reset: the truncation bootstrap.
            # Where the episode goes on, `next_value` is replaced after the
            # rollout by V(next obs), which already carries a redrawn tag.
            final_value = network.apply(train_state.params, info["final_obs"], method=ActorCritic.value)
            alive_after = info["final_obs"][..., OWN_HP] > 0.0
            # A timeout bootstraps from V(final_obs) unless `timeout_is_terminal` makes it worth 0.
            no_bootstrap = done if config.timeout_is_terminal else info["terminated"]
            died = ~alive_after
            transition = Transition(
                obs=obs,
                action=action,
                log_prob=log_prob,
                value=value,
                reward=reward,
                next_value=final_value,
                cut=jnp.broadcast_to(no_bootstrap[:, None], died.shape) | died,
                end=jnp.broadcast_to(done[:, None], died.shape) | died,
                mask=info["alive"],
            )
            episode = {
                "done": done,
                "outcome": info["outcome"],
                "length": info["episode_time"],
                "ret": jnp.mean(info["returned_episode_returns"], axis=-1),
            }
            carry = (train_state, log_state, _shard_env(next_obs), rng)
            return carry, (transition, episode)

        carry = (runner.train_state, runner.log_state, runner.obs, runner.rng)
        carry, (traj, episodes) = jax.lax.scan(_env_step, carry, None, n_steps)
        train_state, log_state, obs, rng = carry
        # Bootstrap values: while the episode continues, V(s_{t+1}) is the next
        # step's own estimate (same params; its obs carries any redrawn tag);
        # where it ended, V(final_obs) from the rollout (used at truncations;
        # terminations cut it in GAE).
        last_value = network.apply(train_state.params, obs, method=ActorCritic.value)
        following = jnp.concatenate([traj.value[1:], last_value[None]])
        ended = jnp.broadcast_to(episodes["done"][..., None], following.shape)
        traj = traj._replace(next_value=jnp.where(ended, traj.next_value, following))

        # ---- advantages ---------------------------------------------------
        hyper = runner.hyper
        advantages, targets = calculate_gae(
            traj.reward, traj.value, traj.next_value, traj.cut, traj.end, hyper["gamma"], hyper["gae_lambda"]
        )

        # ---- PPO epochs ---------------------------------------------------
        _loss = functools.partial(ppo_loss, network, config, hyper=hyper)

        def _update_epoch(state, _):
            train_state, rng = state
            rng, k_perm = jax.random.split(rng)
            # Flatten (time, envs, NPCs) into one batch of agent samples.
            flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[3:]), (traj, advantages, targets))
            perm = jax.random.permutation(k_perm, flat[1].shape[0])
            shuffled = jax.tree.map(lambda x: _minibatches(x, perm, config.num_minibatches, mesh), flat)

            def _update_minbatch(train_state, minibatch):
                batch, adv, tgt = minibatch
                # Linear anneal over `anneal_grad_steps` (constant where `ent_coef_end` was None: see hyper_of).
                frac = jnp.clip(train_state.step / n_grad_steps, 0.0, 1.0)
                ent_coef = hyper["ent_coef"] + frac * (hyper["ent_coef_end"] - hyper["ent_coef"])
                (loss, aux), grads = jax.value_and_grad(_loss, has_aux=True)(
                    train_state.params, batch, adv, tgt, ent_coef
                )
                train_state = _apply_gradients(train_state, grads, hyper)
                return train_state, dict(aux, total_loss=loss)

            train_state, losses = jax.lax.scan(_update_minbatch, train_state, shuffled)
            return (train_state, rng), losses

        (train_state, rng), losses = jax.lax.scan(_update_epoch, (train_state, rng), None, config.update_epochs)

        metrics = _episode_metrics(episodes, traj.mask)
        # Per-step reward of living NPCs: a learning signal that needs no finished episode.
        metrics["reward_mean"] = masked_mean(traj.reward, traj.mask)
        metrics.update({k: jnp.mean(v) for k, v in losses.items()})
        update = runner.update + 1
        metrics["update"] = update
        metrics["env_steps"] = update.astype(jnp.float32) * float(config.steps_per_update)

        runner = RunnerState(train_state, log_state, obs, rng, update, hyper)
        return runner, metrics

    def _episode_metrics(ep: dict, alive_mask) -> dict:
        done = ep["done"]
        n = jnp.sum(done)
        denom = jnp.maximum(n, 1)

        def nan_if_none(x):
            return jnp.where(n > 0, x, jnp.nan)

        per_bot = jax.nn.one_hot(bot_types, len(BOT_TYPES), dtype=jnp.int32)  # (envs, 3)

        def count_per_bot(flag):
            return jnp.sum((done & flag).astype(jnp.int32) @ per_bot, axis=0)  # (3,)

        return {
            "episodes": n,
            "return_mean": nan_if_none(jnp.sum(jnp.where(done, ep["ret"], 0.0)) / denom),
            "length_mean": nan_if_none(jnp.sum(jnp.where(done, ep["length"], 0.0)) / denom),
            "npc_win_rate": nan_if_none(jnp.sum(done & (ep["outcome"] == NPC_WIN)) / denom),
            "bot_win_rate": nan_if_none(jnp.sum(done & (ep["outcome"] == BOT_WIN)) / denom),
            "timeout_rate": nan_if_none(jnp.sum(done & (ep["outcome"] == TIMEOUT)) / denom),
            "timeouts": jnp.sum(done & (ep["outcome"] == TIMEOUT)),
            "episodes_per_bot": count_per_bot(jnp.ones_like(done)),
            "npc_wins_per_bot": count_per_bot(ep["outcome"] == NPC_WIN),
            "bot_wins_per_bot": count_per_bot(ep["outcome"] == BOT_WIN),
            "timeouts_per_bot": count_per_bot(ep["outcome"] == TIMEOUT),
            "alive_frac": jnp.mean(alive_mask.astype(jnp.float32)),
        }

    def run_updates(runner: RunnerState, n: int):
        return jax.lax.scan(_update_step, runner, None, n)

    return Trainer(config=config, network=network, init=init, run_updates=run_updates, mesh=mesh)


def is_key_batch(keys) -> bool:
    """True for a batch of PRNG keys: typed keys of rank >= 1, or raw uint32 keys of shape (N, 2)."""
    keys = jnp.asarray(keys) if not isinstance(keys, jax.Array) else keys
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        return keys.ndim >= 1
    return keys.ndim >= 2


def make_train(config: PPOConfig, mesh: Mesh | None | str = "auto") -> Callable[[jax.Array], tuple[RunnerState, dict]]:
    """PureJaxRL's shape: `train(rng) -> (runner_state, metrics)`, all `config.num_updates`.

    Jit it: `jax.jit(make_train(config))(jax.random.PRNGKey(0))`. Given a batch of keys
    (`jax.random.split(key, n)`), it trains one run per key in the same program (vmapped;
    every leaf of the result gains a leading axis of n). A vmapped batch keeps each run's env
    axis on one device; `jaxarena.algorithms.multi_run` shards the runs over devices instead.
    """
    single = make_trainer(config, mesh)
    per_run = single if mesh is None else make_trainer(config, None)

    def train_one(trainer, rng):
        return trainer.run_updates(trainer.init(rng), config.num_updates)

    def train(rng: jax.Array):
        if is_key_batch(rng):
            return jax.vmap(functools.partial(train_one, per_run))(rng)
        return train_one(single, rng)

    return train

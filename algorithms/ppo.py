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

The update itself is the project's one PPO core (`algorithms.ppo_core`); this module is the
arena around it (`arena_env`): `num_envs` arenas (vmapped; sharded over devices when a mesh is
given) x 5 NPCs whose (envs x NPCs) axes the shared policy sees as one batch of agent samples,
with the transitions of NPCs dead at the start of a step (info["alive"] False) masked out of
every loss term; recipe B's tag redraws; the truncation bootstrap from V(final_obs) (or a
terminal timeout, `timeout_is_terminal`); the approach shaping; per-bot episode metrics; and the
frozen tag experts.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct
from flax.training.train_state import TrainState
from jax.sharding import Mesh

import jaxarena
from jaxarena.names import BOT_TYPES, BOT_WIN, NPC_WIN, NUM_NPCS, TIMEOUT
from jaxarena.observe import BOT_DISTANCE, OWN_HP
from jaxarena.types import arena_diagonal
from jaxarena.wrappers import LogState, LogWrapper

from .arena_knobs import arena_knobs_of
from .batch_runs import is_key_batch, train_fn
from .config import RECIPES, PPOConfig
from .networks import expert_mask, network_of
from .ppo_core import ENV_AXIS, CoreConfig, CoreEnv, Step, Trainer, make_core_trainer
from .ppo_objective import hyper_of

__all__ = ["MemoryRunnerState", "RunnerState", "make_train", "make_trainer"]


@struct.dataclass
class RunnerState:
    """Everything a run carries between updates (and what a checkpoint holds); `ppo_core.CoreState`'s
    fields in its order, the env state named for what it is here."""

    train_state: TrainState
    log_state: LogState  # the arenas and their running episode returns, batched over envs: leaves (num_envs, ...)
    obs: jax.Array  # (num_envs, 5, obs_size) float32, the current observation
    rng: jax.Array  # (2,) uint32 raw PRNG key (raw, so orbax stores it plainly)
    update: jax.Array  # () int32, updates done so far
    # The float hyper-parameters (`SWEEPABLE`) as () float32 arrays: values, not constants of the program,
    # so runs that differ only in them are one vmapped program (and a checkpoint records them).
    hyper: dict

    @property
    def env_state(self) -> LogState:
        """The name the PPO core reads the env state by."""
        return self.log_state


@struct.dataclass
class MemoryRunnerState(RunnerState):
    """The runner state of a squad with memory (`PPOConfig.memory`): each NPC's GRU state besides."""

    memory: jax.Array  # (num_envs, 5, memory) float32, reset where the NPC's trajectory ended


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


def core_config(config: PPOConfig) -> CoreConfig:
    """The PPO core's view of `config`: 5 agent samples per env step, lr annealed at every minibatch."""
    floats = ("lr", "gamma", "gae_lambda", "clip_eps", "ent_coef", "ent_coef_end", "vf_coef", "max_grad_norm")
    return CoreConfig(
        num_envs=config.num_envs,
        num_steps=config.num_steps,
        update_epochs=config.update_epochs,
        num_minibatches=config.num_minibatches,
        agents=NUM_NPCS,
        anneal_lr=config.anneal_lr,
        total_updates=config.num_updates,
        anneal_updates=config.anneal_grad_steps // (config.update_epochs * config.num_minibatches),
        lr_staircase=False,
        ent_target=config.ent_target,
        **{name: getattr(config, name) for name in floats},
    )


def arena_env(config: PPOConfig, env: LogWrapper, base_params) -> CoreEnv:
    """The arena as the PPO core's `CoreEnv` (the module docstring lists what it adds)."""
    bot_types = bot_types_for(config)
    n_envs = config.num_envs

    def _env_params(bot_type, hyper):
        # The run's arena knobs come from its runner state, so runs of one program may differ in them.
        return base_params.replace(bot_type=bot_type, **arena_knobs_of(hyper))

    v_reset = jax.vmap(lambda k, bt, h: env.reset(k, _env_params(bt, h)), in_axes=(0, 0, None))
    v_step = jax.vmap(lambda k, s, a, bt, h: env.step(k, s, a, _env_params(bt, h)), in_axes=(0, 0, 0, 0, None))
    v_retag = jax.vmap(lambda o, s, t, bt, h: env.retag(o, s, t, _env_params(bt, h)), in_axes=(0, 0, 0, 0, None))

    def _redraw_tags(key, obs, state, hyper):
        """Recipe B: a uniform new tag every tag period (incl. t = 0 after a reset)."""
        if config.combination != "B":
            return obs, state
        # With the default tags (0..3) this indexes an identity table: the same draws as randint(0, 4).
        pick = jax.random.randint(key, (n_envs,), 0, len(config.tags), dtype=jnp.int32)
        new = jnp.asarray(config.tags, jnp.int32)[pick]
        arena = state.env_state
        tags = jnp.where(arena.t % config.tag_period_ticks == 0, new, arena.tag)
        return v_retag(obs, state, tags, bot_types, hyper)

    def reset(k_env, k_tag, hyper):
        obs, log_state = v_reset(jax.random.split(k_env, n_envs), bot_types, hyper)
        return _redraw_tags(k_tag, obs, log_state, hyper)

    def _approach_bonus(obs, next_obs, cut, hyper):
        """Each NPC's potential-based approach shaping (`PPOConfig.approach_shaping`): (envs, 5)."""
        far = hyper["approach_range"] / arena_diagonal(base_params)  # obs distances are / diagonal

        def potential_of(o):
            return -hyper["approach_shaping"] * jnp.maximum(o[..., BOT_DISTANCE] - far, 0.0)

        potential, next_potential = potential_of(obs), potential_of(next_obs)
        return hyper["gamma"] * jnp.where(cut, 0.0, next_potential) - potential

    def step(k_step, k_tag, log_state, obs, action, hyper):
        keys = jax.random.split(k_step, n_envs)
        next_obs, log_state, reward, done, info = v_step(keys, log_state, action, bot_types, hyper)
        # The next obs carries the redrawn tag, and so does the bootstrap V(next obs) while the episode goes on.
        next_obs, log_state = _redraw_tags(k_tag, next_obs, log_state, hyper)
        alive_after = info["final_obs"][..., OWN_HP] > 0.0
        # A timeout bootstraps from V(final_obs) unless `timeout_is_terminal` makes it worth 0.
        no_bootstrap = done if config.timeout_is_terminal else info["terminated"]
        died = ~alive_after
        cut = jnp.broadcast_to(no_bootstrap[:, None], died.shape) | died
        reward = reward + _approach_bonus(obs, info["final_obs"], cut, hyper)
        episode = {
            "done": done,
            "outcome": info["outcome"],
            "length": info["episode_time"],
            "ret": jnp.mean(info["returned_episode_returns"], axis=-1),
        }
        end = jnp.broadcast_to(done[:, None], died.shape) | died
        return next_obs, log_state, Step(reward, done, cut, end, info["alive"], info["final_obs"], episode)

    def metrics(ep: dict, traj) -> dict:
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
            "alive_frac": jnp.mean(traj.mask.astype(jnp.float32)),
        }

    return CoreEnv(2, reset, step, metrics)


def make_trainer(config: PPOConfig, mesh: Mesh | None | str = "auto") -> Trainer:
    """Build `init(rng, hyper=None) -> RunnerState` and `run_updates(state, n) -> (state, metrics)`.

    Both are pure and jittable (`run_updates` with `n` static). `mesh`:
    "auto" shards the env batch over all visible devices (see
    `default_mesh`), None keeps one device, or pass a 1-D `Mesh` whose axis
    is named "env". Metrics come back stacked over the n updates: the
    episode metrics of `arena_env`, reward_mean, the losses, update and
    env_steps.
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
    network = network_of(config.network_kwargs())
    frozen = (lambda grads: expert_mask(grads, config.frozen_tags)) if config.frozen_tags else None
    core = make_core_trainer(
        arena_env(config, env, base_params),
        network,
        core_config(config),
        hyper=hyper_of(config),
        frozen=frozen,
        mesh=mesh,
        state_type=MemoryRunnerState if config.memory else RunnerState,
    )

    def run_updates(runner: RunnerState, n: int):
        runner, metrics = core.run_updates(runner, n)
        metrics["env_steps"] = metrics["update"].astype(jnp.float32) * float(config.steps_per_update)
        return runner, metrics

    return Trainer(config=config, network=network, init=core.init, run_updates=run_updates, mesh=mesh)


def make_train(config: PPOConfig, mesh: Mesh | None | str = "auto") -> Callable[[jax.Array], tuple[RunnerState, dict]]:
    """PureJaxRL's shape: `train(rng) -> (runner_state, metrics)`, all `config.num_updates`.

    Jit it: `jax.jit(make_train(config))(jax.random.PRNGKey(0))`. Given a batch of keys
    (`jax.random.split(key, n)`), it trains one run per key in the same program (vmapped;
    every leaf of the result gains a leading axis of n). A vmapped batch keeps each run's env
    axis on one device; `jaxarena.algorithms.multi_run` shards the runs over devices instead.
    """
    single = make_trainer(config, mesh)
    per_run = single if mesh is None else make_trainer(config, None)
    train_single, train_batch = train_fn(single, config.num_updates), train_fn(per_run, config.num_updates)

    def train(rng: jax.Array):
        return train_batch(rng) if is_key_batch(rng) else train_single(rng)

    return train

"""The one PPO core, PureJaxRL-style: every learner of the project trains with it.

An update is a `lax.scan` of `num_steps` env steps, GAE, then `update_epochs` epochs of shuffled
minibatches of the clipped loss (`ppo_objective.ppo_loss`), each an Adam step whose clip norm and
annealed learning rate are read from the run's `hyper` dict. Those floats (`SWEEPABLE`) travel in
the runner state, not in the program, so seeds and settings of them vmap into one program.

    trainer = make_core_trainer(env, network, CoreConfig(num_envs=64, total_updates=100))
    state, metrics = jax.jit(batch_runs.train_fn(trainer, 100))(jax.random.split(key, 8))  # 8 seeds, one program

What a learner adds around the core is a `CoreEnv`: its reset and step (reward, where the episode
ends, where it is cut without a bootstrap, which samples count, the observation a truncation
bootstraps from) and its per-update episode metrics. `single_learner` makes one from any batched,
auto-resetting, one-agent env (the RL selector's decision env, the learned bot's arena), whose
episode ends are terminal; `algorithms.ppo` builds the arena's (five NPCs per env flattened as
samples, dead ones masked, tag redraws, the truncation bootstrap, approach shaping, per-bot
metrics). `make_core_trainer`'s `frozen` keeps chosen parameters at their values (the arena's
frozen tag experts). A recurrent network (`networks.RecurrentActorCritic`, one with
`initial_memory`) carries its memory in the runner state, reset where a sample's trajectory ends,
and its minibatches are whole sequences (`algorithms.memory`, PureJaxRL's recurrent PPO shape).

`network.apply(params, obs) -> (logits or distrax.Categorical, value)` on a batch; an invalid
action is masked by a logit of -inf. A `value` method, where the network has one, runs the critic
alone for the truncation bootstrap.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import distrax
import jax
import jax.numpy as jnp
import optax
from flax import struct
from flax.training.train_state import TrainState
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .memory import SequenceNetwork, Sequences, as_sequences, first_steps, reset_where, sequence_minibatches
from .networks import is_recurrent
from .ppo_objective import Transition, calculate_gae, hyper_of, masked_mean, policy_and_value, ppo_loss

ENV_AXIS = "env"


@dataclasses.dataclass(frozen=True)
class CoreConfig:
    """The shapes and schedule of a PPO run, and the defaults of its float hyper-parameters."""

    num_envs: int = 64
    num_steps: int = 32  # env steps per environment between updates
    update_epochs: int = 4
    num_minibatches: int = 4
    agents: int = 1  # samples per env step: the arena's 5 NPCs share one policy
    lr: float = 3e-4
    anneal_lr: bool = True
    total_updates: int = 100  # the run's length in updates, over which lr (and ent_coef) anneal
    anneal_updates: int | None = None  # the anneals' length in updates where it is not the run's
    # True (PureJaxRL's schedule): lr falls once per update; False: at every minibatch.
    lr_staircase: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    ent_coef_end: float | None = None  # None: constant; else linear anneal ent_coef -> this
    ent_target: float | None = None  # see PPOConfig.ent_target
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5

    def __post_init__(self):
        names = ("num_envs", "num_steps", "update_epochs", "num_minibatches", "agents", "total_updates")
        for name in names + (("anneal_updates",) if self.anneal_updates is not None else ()):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.samples_per_update % self.num_minibatches:
            raise ValueError(
                f"num_envs * num_steps * agents = {self.samples_per_update} must divide into "
                f"num_minibatches = {self.num_minibatches}"
            )
        if not 0.0 <= self.lr < float("inf"):  # 0: a run that does not learn (a sweep's baseline)
            raise ValueError(f"lr must be a finite rate >= 0, got {self.lr}")

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def samples_per_update(self) -> int:
        return self.num_envs * self.num_steps * self.agents

    @property
    def anneal_grad_steps(self) -> int:
        """Adam steps over which lr (to 0) and ent_coef (to ent_coef_end) anneal."""
        updates = self.total_updates if self.anneal_updates is None else self.anneal_updates
        return updates * self.update_epochs * self.num_minibatches


@struct.dataclass
class CoreState:
    """A run between updates. `algorithms.ppo.RunnerState` has the same fields in the same order."""

    train_state: TrainState
    env_state: Any
    obs: Any
    rng: jax.Array  # (2,) uint32 raw PRNG key
    update: jax.Array  # () int32, updates done so far
    hyper: dict  # the float hyper-parameters (`hyper_of`) as () float32 arrays


@struct.dataclass
class CoreMemoryState(CoreState):
    """A run of a recurrent network: `CoreState` and the memory each sample carries (`algorithms.memory`)."""

    memory: jax.Array  # (num_envs[, agents], memory units), reset where a sample's trajectory ended


class Step(NamedTuple):
    """What a `CoreEnv` step reports besides the next observation and env state.

    Leaves lead with (num_envs,) or (num_envs, agents) like the reward; `done` is per env.
    """

    reward: jax.Array
    done: jax.Array  # the env reset after this step: the next obs starts another episode
    cut: jax.Array  # no bootstrap: the sample's episode ended for good
    end: jax.Array  # the sample's trajectory ends here (GAE does not chain past it)
    mask: jax.Array | None  # samples that count in the loss; None: all
    final_obs: Any  # where `done`, V(final_obs) bootstraps a truncation; None: no bootstrap
    episode: Any  # anything `CoreEnv.metrics` reads, stacked over the update's steps


class CoreEnv(NamedTuple):
    """A learner's environment as the core sees it (see the module docstring).

    `reset(*keys, hyper) -> (obs, env_state)`; `step(*keys, env_state, obs, action, hyper) -> (next_obs,
    env_state, Step)`; each takes `num_keys` PRNG keys. `metrics(episodes, traj) -> dict` of the
    update's episode metrics, from the stacked `Step.episode` and the `Transition`s.
    """

    num_keys: int
    reset: Callable
    step: Callable
    metrics: Callable


class Trainer(NamedTuple):
    """`init(rng, hyper=None) -> state` and `run_updates(state, n) -> (state, metrics stacked over n)`."""

    config: Any
    network: Any
    init: Callable
    run_updates: Callable
    mesh: Mesh | None


def single_learner(env) -> CoreEnv:
    """The `CoreEnv` of a batched, auto-resetting, one-agent env.

    `env.reset(key) -> (obs, env_state)`, `env.step(key, env_state, action (num_envs,)) -> (obs,
    env_state, reward (num_envs,), done (num_envs,), info)`. An episode's end is terminal (no
    bootstrap). Metrics: `episodes` ended in the update and the mean of every `info` entry over
    them (NaN if none).
    """

    def reset(key, hyper):
        return env.reset(key)

    def step(key, env_state, obs, action, hyper):
        next_obs, env_state, reward, done, info = env.step(key, env_state, action)
        return next_obs, env_state, Step(reward, done, done, done, None, None, (done, info))

    def metrics(episodes, traj):
        done, info = episodes
        ended = done.astype(jnp.float32)
        n_ended = jnp.sum(ended)
        out = {"episodes": n_ended}
        for name, value in info.items():
            total = jnp.sum(jnp.asarray(value, jnp.float32) * ended)
            out[name] = jnp.where(n_ended > 0, total / jnp.maximum(n_ended, 1.0), jnp.nan)
        return out

    return CoreEnv(1, reset, step, metrics)


def shard_env(x, mesh: Mesh | None):
    """Keep an env-axis array split over the mesh (a no-op on one device)."""
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(ENV_AXIS, *([None] * (x.ndim - 1)))))


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


def _next_values(traj: Transition, done, last_value):
    """V(s_{t+1}) of every step: while the episode continues, the next step's own estimate (same params;
    its obs carries whatever the env changed, e.g. a redrawn tag); where the env reset, V(final_obs)
    from the rollout (used at truncations; terminations cut it in GAE), if the env gave one."""
    following = jnp.concatenate([traj.value[1:], last_value[None]])
    if traj.next_value is None:
        return following
    ended = done.reshape(done.shape + (1,) * (following.ndim - done.ndim))
    return jnp.where(jnp.broadcast_to(ended, following.shape), traj.next_value, following)


def _critic(network) -> Callable:
    """`value(params, obs)`: the critic alone where the network has a `value` method, else its output's value."""
    method = getattr(type(network), "value", None)

    def value(params, obs):
        if method is None:
            return policy_and_value(network, params, obs)[1]
        return network.apply(params, obs, method=method)

    return value


def _adam_step(tx, config: CoreConfig, frozen, train_state: TrainState, grads, hyper: dict) -> TrainState:
    """One Adam step: frozen parameters' gradients zeroed, the global norm clipped, lr annealed to 0."""
    if frozen is not None:  # a zero gradient leaves Adam's moments, and so the weights, exactly as they were
        grads = jax.tree.map(lambda g, f: jnp.zeros_like(g) if f else g, grads, frozen(grads))
    norm = optax.tree.norm(grads)
    scale = jnp.where(norm < hyper["max_grad_norm"], 1.0, hyper["max_grad_norm"] / norm)
    grads = jax.tree.map(lambda g: g * scale, grads)
    updates, opt_state = tx.update(grads, train_state.opt_state, train_state.params)
    lr = hyper["lr"]
    per_update, n_grad_steps = config.update_epochs * config.num_minibatches, config.anneal_grad_steps
    if config.anneal_lr and config.lr_staircase:  # down one step per update, to 0 after the anneal's updates
        n_updates = n_grad_steps // per_update
        lr = lr * (1.0 - jnp.minimum(train_state.step // per_update, n_updates) / n_updates)
    elif config.anneal_lr:  # linear to 0 over the anneal's Adam steps, then 0
        lr = lr * (1.0 - jnp.minimum(train_state.step, n_grad_steps) / n_grad_steps)
    params = optax.apply_updates(train_state.params, jax.tree.map(lambda u: -lr * u, updates))
    return train_state.replace(step=train_state.step + 1, params=params, opt_state=opt_state)


class _CoreNetwork:
    """The network as the core calls it, one path for a feed-forward network and a recurrent one
    (`algorithms.memory`; `memory` is None without one): fresh parameters, acting, the critic, and
    each epoch's minibatches of samples (feed-forward) or of whole sequences (recurrent)."""

    def __init__(self, network, config: CoreConfig, mesh: Mesh | None):
        self.network, self.config, self.mesh = network, config, mesh
        self.recurrent = is_recurrent(network)
        self.for_loss = SequenceNetwork(network) if self.recurrent else network
        self._critic = _critic(network)

    def init(self, key, obs) -> tuple[Any, tuple]:
        """(params, the memory a run starts with: one row per sample, or () without one)."""
        first_rows = jax.tree.map(lambda x: x[:1], obs)
        if not self.recurrent:
            return self.network.init(key, first_rows), ()
        memory = shard_env(self.network.initial_memory(obs.shape[:-1]), self.mesh)
        return self.network.init(key, memory[:1], first_rows), (memory,)

    def act(self, params, memory, obs):
        """(pi, value, the memory after the step) at `obs`."""
        if not self.recurrent:
            return (*policy_and_value(self.network, params, obs), None)
        memory, logits, value = self.network.apply(params, memory, obs)
        return distrax.Categorical(logits=logits), value, memory

    def value(self, params, memory, obs):
        return self.network.apply(params, memory, obs)[2] if self.recurrent else self._critic(params, obs)

    def minibatches(self, key, traj, advantages, targets, memory):
        """The epoch's minibatches (leading axis num_minibatches) of (trajectory, advantages, targets)."""
        n_lead, m = traj.action.ndim, self.config.num_minibatches
        if self.recurrent:  # whole sequences, each from the memory it started with
            seqs = jax.tree.map(lambda x: as_sequences(x, n_lead), (traj, advantages, targets, first_steps(traj.end)))
            start = memory.reshape((-1,) + memory.shape[n_lead - 1 :])
            perm = jax.random.permutation(key, start.shape[0])
            (batch, adv, tgt, first), start = sequence_minibatches(seqs, start, perm, m)
            return batch._replace(obs=Sequences(batch.obs, first, start)), adv, tgt
        # Flatten (time, envs[, agents]) into one batch of samples.
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[n_lead:]), (traj, advantages, targets))
        perm = jax.random.permutation(key, flat[1].shape[0])
        return jax.tree.map(lambda x: _minibatches(x, perm, m, self.mesh), flat)


def make_core_trainer(
    env, network, config: CoreConfig, *, hyper=None, frozen=None, mesh: Mesh | None = None, state_type=CoreState
) -> Trainer:
    """The init / run_updates pair of a PPO run (see the module docstring).

    `env`: a `CoreEnv`, or a one-agent env `single_learner` wraps. `hyper`: the float
    hyper-parameters a fresh run gets (default `hyper_of(config)`). `frozen(params)`: a pytree of
    bools marking parameters whose gradient is zeroed, so Adam leaves them as they were. `mesh`:
    a 1-D mesh named "env" the env batch is split over. `state_type`: the runner state's class,
    with a `memory` field last for a recurrent network (`CoreMemoryState`), which is applied as
    `apply(params, memory, obs) -> (memory, logits, value)` (`algorithms.memory`).
    """
    if not isinstance(env, CoreEnv):
        env = single_learner(env)
    # Adam's moments alone are the optimiser's state; the clip norm and the annealed learning rate are
    # applied in `_adam_step` from the runner's `hyper`, so they may differ between vmapped runs.
    tx = optax.scale_by_adam(eps=1e-5)
    n_grad_steps = config.anneal_grad_steps
    default_hyper = hyper_of(config) if hyper is None else hyper
    apply_gradients = functools.partial(_adam_step, tx, config, frozen)
    net = _CoreNetwork(network, config, mesh)
    recurrent = net.recurrent

    def init(rng: jax.Array, hyper: dict | None = None):
        """A fresh run from `rng`, with `hyper` (default: the trainer's)."""
        rng = jnp.asarray(rng)
        if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
            rng = jax.random.key_data(rng)
        rng, k_net, *k_env = jax.random.split(rng, 2 + env.num_keys)
        hyper = default_hyper if hyper is None else {k: jnp.float32(v) for k, v in hyper.items()}
        obs, env_state = env.reset(*k_env, hyper)
        params, memory = net.init(k_net, obs)
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        env_state, obs = jax.tree.map(lambda x: shard_env(x, mesh), (env_state, obs))
        return state_type(train_state, env_state, obs, rng, jnp.int32(0), hyper, *memory)

    def _rollout(state):
        """`num_steps` env steps: (env_state, obs, rng, trajectory, episodes), time-major."""
        params = state.train_state.params

        def _env_step(carry, _):
            env_state, obs, memory, rng = carry
            rng, k_act, *k_env = jax.random.split(rng, 2 + env.num_keys)
            pi, value, memory = net.act(params, memory, obs)
            action = pi.sample(seed=k_act)
            next_obs, env_state, out = env.step(*k_env, env_state, obs, action, state.hyper)
            # V of the state reached, before auto-reset: the truncation bootstrap.
            final_value = None if out.final_obs is None else net.value(params, memory, out.final_obs)
            if recurrent:  # a trajectory that ended starts the next one from a fresh memory
                memory = reset_where(memory, out.end)
            transition = Transition(
                obs, action, pi.log_prob(action), value, out.reward, final_value, out.cut, out.end, out.mask
            )
            return (env_state, shard_env(next_obs, mesh), memory, rng), (transition, (out.done, out.episode))

        carry = (state.env_state, state.obs, state.memory if recurrent else None, state.rng)
        (env_state, obs, memory, rng), (traj, (done, episodes)) = jax.lax.scan(_env_step, carry, None, config.num_steps)
        traj = traj._replace(next_value=_next_values(traj, done, net.value(params, memory, obs)))
        return env_state, obs, memory, rng, traj, episodes

    def _update_epoch(carry, _, traj, advantages, targets, memory, hyper):
        train_state, rng = carry
        rng, k_perm = jax.random.split(rng)
        shuffled = net.minibatches(k_perm, traj, advantages, targets, memory)

        def _update_minibatch(train_state, minibatch):
            batch, adv, tgt = minibatch
            # Linear anneal over the anneal's Adam steps (constant where `ent_coef_end` was None: see hyper_of).
            frac = jnp.clip(train_state.step / n_grad_steps, 0.0, 1.0)
            ent_coef = hyper["ent_coef"] + frac * (hyper["ent_coef_end"] - hyper["ent_coef"])
            loss_fn = lambda p: ppo_loss(net.for_loss, config, p, batch, adv, tgt, ent_coef, hyper=hyper)  # noqa: E731
            (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(train_state.params)
            return apply_gradients(train_state, grads, hyper), dict(aux, total_loss=loss)

        train_state, losses = jax.lax.scan(_update_minibatch, train_state, shuffled)
        return (train_state, rng), losses

    def _update(state, _):
        env_state, obs, memory, rng, traj, episodes = _rollout(state)
        hyper = state.hyper
        advantages, targets = calculate_gae(
            traj.reward, traj.value, traj.next_value, traj.cut, traj.end, hyper["gamma"], hyper["gae_lambda"]
        )
        start = state.memory if recurrent else None  # the memory the rollout started from
        epoch = lambda c, x: _update_epoch(c, x, traj, advantages, targets, start, hyper)  # noqa: E731
        (train_state, rng), losses = jax.lax.scan(epoch, (state.train_state, rng), None, config.update_epochs)
        metrics = env.metrics(episodes, traj)
        metrics["reward_mean"] = masked_mean(traj.reward, traj.mask)
        metrics.update({k: jnp.mean(v) for k, v in losses.items()})
        update = state.update + 1
        metrics["update"] = update
        kept = (memory,) if recurrent else ()
        return type(state)(train_state, env_state, obs, rng, update, hyper, *kept), metrics

    def run_updates(state, n: int):
        return jax.lax.scan(_update, state, None, n)

    return Trainer(config, network, init, run_updates, mesh)

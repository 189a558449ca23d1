"""No training stream starts an episode where a protocol episode starts.

The protocol's cell of (seed, bot) is keyed `fold_in(PRNGKey(seed), bot index)`, and its episode i
spawns from `fold_in(split(cell key, episodes)[i], 0)` (the runner's schedule, pinned by
tests/test_runner.py). Every training stream folds a constant of its own into the seed's key
(`jaxarena.key_streams`). Checked here on the spawns themselves, the NPC and bot positions the
arena's reset draws: for training seeds 0-19 of every stream, no spawn equals one of the
protocol's seeds 0-19, with `jax_threefry_partitionable` on (jax's default, where `split(k, n)[i]`
is `fold_in(k, i)`, so a bare seed key meets the protocol's) and off (where a split depends on its
count). The check is shown to find the collisions of the dataset's old keys, and each trainer's
reset keys are derived the way its init draws them (tested against the trainers' own resets).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_script

import jaxarena
from jaxarena import key_streams
from jaxarena.algorithms import PPOConfig, train_loop
from jaxarena.algorithms.bot_training import train_bot
from jaxarena.algorithms.ppo_core import CoreConfig, CoreEnv, make_core_trainer
from jaxarena.algorithms.ppo_objective import hyper_of
from jaxarena.algorithms.train_many import EVAL_KEY
from jaxarena.coder.batch_rollout import episode_keys
from jaxarena.coder.score_types import ScoreConfig
from jaxarena.key_streams import learned_bot_key, selector_key, training_key
from jaxarena.llm.tuning import data, glance
from jaxarena.llm.tuning.data import SOURCES, SPLITS, DataConfig, part_key
from jaxarena.llm.tuning.glance import GlanceConfig
from jaxarena.llm.tuning.train import TrainConfig, grpo_key
from jaxarena.names import BOT_TYPES
from jaxarena.protocol.config import cell_key_data
from jaxarena.protocol.pricing import PRICING_STREAM
from jaxarena.scenarios import SCENARIOS
from jaxarena.selector.train import SelectorConfig
from jaxarena.spawn import initial_state

pytestmark = pytest.mark.project

PROTOCOL_SEEDS = range(20)
TRAINING_SEEDS = range(20)
#: PPO is checked on these too: a 20-seed run from `--seed 1000`.
PPO_RUN_SEEDS = range(1000, 1020)
#: Episodes per cell the protocol is run with. With partitionable keys episode i is the same for
#: every count, so the largest covers the others; without, each count draws other keys.
PROTOCOL_EPISODES = (100, 200, 500, 1000)
_, PARAMS = jaxarena.make("Arena-v0")
ROOT = Path(__file__).resolve().parents[1]
#: The learned bot's arenas: `train_bot`'s default, which the selector's `_learned_bots` keeps.
BOT_NUM_ENVS = inspect.signature(train_bot).parameters["num_envs"].default
CHUNK = 4096  # positions are computed in chunks of one shape: one compile per setting


@contextlib.contextmanager
def threefry(partitionable: bool):
    before = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", partitionable)
    try:
        yield
    finally:
        jax.config.update("jax_threefry_partitionable", before)


@pytest.fixture(params=[True, False], ids=["partitionable", "original"])
def partitionable(request):
    with threefry(request.param):
        yield request.param


def raw(keys) -> jax.Array:
    """(m, 2) uint32 key data of typed or raw keys of any leading shape."""
    keys = jax.random.key_data(keys) if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key) else keys
    return jnp.asarray(keys).reshape(-1, 2)


@jax.jit
def _positions(keys):
    states = jax.vmap(lambda k: initial_state(k, PARAMS))(keys)
    return jnp.concatenate([states.npc_pos.reshape(len(keys), -1), states.bot_pos], axis=1)


def spawns(reset_keys) -> np.ndarray:
    """(m, 12) float32: the NPCs' and the bot's positions a reset from each key draws."""
    keys = np.asarray(raw(reset_keys))
    pad = -len(keys) % CHUNK
    keys = np.concatenate([keys, np.zeros((pad, 2), keys.dtype)])
    out = np.concatenate([np.asarray(_positions(keys[i : i + CHUNK])) for i in range(0, len(keys), CHUNK)])
    return out[: len(out) - pad]


def runner_reset_keys(roots, n: int) -> jax.Array:
    """The reset keys of the runner's n episodes for each root key: fold_in(split(root, n)[i], 0)."""
    return jax.vmap(lambda root: jax.vmap(lambda k: jax.random.fold_in(k, 0))(jax.random.split(root, n)))(roots)


@functools.cache
def protocol_spawns(partitionable: bool) -> dict[bytes, tuple]:
    """spawn bytes -> (seed, bot, episodes, episode) of the protocol's episodes, seeds 0-19."""
    labels = [(seed, bot) for seed in PROTOCOL_SEEDS for bot in BOT_TYPES]
    cells = jnp.stack([jnp.asarray(cell_key_data(seed, bot)) for seed, bot in labels])
    index = {}
    for count in PROTOCOL_EPISODES[-1:] if partitionable else PROTOCOL_EPISODES:
        for j, row in enumerate(spawns(runner_reset_keys(cells, count))):
            index.setdefault(row.tobytes(), (*labels[j // count], count, j % count))
    return index


def collisions(reset_keys, partitionable: bool) -> list[tuple]:
    """The protocol episodes whose spawn one of `reset_keys` draws."""
    index = protocol_spawns(partitionable)
    return sorted({index[row.tobytes()] for row in spawns(reset_keys) if row.tobytes() in index})


def core_reset_keys(rng, num_keys: int) -> list[jax.Array]:
    """The keys `ppo_core`'s init hands its env's reset: `split(rng, 2 + num_keys)[2:]`."""
    return list(jax.random.split(raw(rng)[0], 2 + num_keys)[2:])


# -- each training stream's episode starts, derived as its code draws them -------------------------------


@functools.partial(jax.jit, static_argnums=1)
def ppo_reset_keys(start, num_envs: int):
    """A PPO run (`jaxarena-train`, `--seeds`, the time-to-policy benchmark) from `start`,
    `training_key(seed)`: `ppo.arena_env`'s reset splits its first key over the arenas."""
    k_env, _k_tag = core_reset_keys(start, 2)
    return jax.random.split(k_env, num_envs)


@functools.partial(jax.jit, static_argnums=1)
def selector_reset_keys(start, num_envs: int):
    """The RL selector from `start`, `selector_key(seed)`: `DecisionEnv.reset` splits its key over the
    lanes, each lane splits (member, episode) and resets from the runner's schedule of one episode."""
    (k_env,) = core_reset_keys(start, 1)

    def lane(key):
        _k_member, k_episode = jax.random.split(key)
        return jax.random.fold_in(jax.random.split(k_episode, 1)[0], 0)

    return jax.vmap(lane)(jax.random.split(k_env, num_envs))


@functools.partial(jax.jit, static_argnums=1)
def bot_reset_keys(start, num_envs: int):
    """The learned bot from `start`, `learned_bot_key(seed)` (`train_bot`): `BotArena.reset` splits
    (reset, clock)."""
    (k_env,) = core_reset_keys(start, 1)
    k_reset, _k_clock = jax.random.split(k_env)
    return jax.random.split(k_reset, num_envs)


def over(derive, starts, n: int):
    """`derive(start, n)` for each start key: (len(starts), n, 2)."""
    return jax.vmap(lambda k: derive(k, n))(jnp.stack(starts))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _data_resets(seeds, parts: int, episodes: int):
    """The dataset's parts (`data.part_key`), each played by the runner."""
    roots = jax.vmap(lambda s: jax.vmap(lambda p: raw(part_key(s, p))[0])(jnp.arange(parts)))(seeds)
    return runner_reset_keys(roots.reshape(-1, 2), episodes)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _grpo_resets(seeds, steps: int, episodes: int):
    """llm/tuning/grpo.py: step i's key (`fold_in(grpo_key(seed), i)`) splits into (play, pick, tags,
    playouts), and the runner plays `episodes` from play (the playouts start from states, not resets)."""
    play = jax.vmap(
        lambda s: jax.vmap(lambda i: jax.random.split(jax.random.fold_in(grpo_key(s), i), 4)[0])(jnp.arange(steps))
    )
    return runner_reset_keys(raw(play(seeds)), episodes)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _glance_resets(seeds, steps: int, bots: int, spawns_per_bot: int):
    """llm/tuning/glance.py: bot b of step i collects on `fold_in(training_key(seed, i), b)`, split into
    (reset, focus, play), and resets its groups' spawns from `split(reset, spawns)` (no runner schedule)."""

    def one(s, i, b):
        k_reset = jax.random.split(jax.random.fold_in(glance.training_key(s, i), b), 3)[0]
        return jax.random.split(k_reset, spawns_per_bot)

    over_bots = jax.vmap(one, (None, None, 0))
    return jax.vmap(lambda s: jax.vmap(lambda i: over_bots(s, i, jnp.arange(bots)))(jnp.arange(steps)))(seeds)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _coder_resets(seeds, bots: int, episodes: int):
    """The coder's scorer (`coder.batch_rollout`): job (bot, episode) is keyed as the protocol keys its
    episode, but a lane resets from `fold_in(split(job key, 1)[0], 0)` (`coder/lanes.py`), a runner of one."""
    jobs = jax.vmap(lambda s: jax.vmap(lambda b: episode_keys(s, b, episodes))(jnp.arange(bots)))(seeds)
    return runner_reset_keys(raw(jobs), 1)


def training_streams() -> dict[str, jax.Array]:
    """Stream name -> the reset keys of its episodes, for training seeds 0-19 (the commands' default sizes)."""
    seeds = list(TRAINING_SEEDS)
    data_config, grpo, glance_config = DataConfig(), TrainConfig(), GlanceConfig()
    parts = [data_config.part_index(b, sp, so) for b in BOT_TYPES for sp in SPLITS for so in SOURCES]
    assert sorted(parts) == list(range(len(parts)))  # every part, once
    summary_episodes = train_loop.parse_args(["--out", "unused"]).eval_episodes
    ttp = load_script(ROOT / "benchmarks" / "time_to_policy.py", "time_to_policy").parse([])
    ttp_roots = (jax.random.PRNGKey(ttp.eval_seed)[None], jax.random.PRNGKey(ttp.eval_seed + 1)[None])
    array, num_envs = jnp.asarray(seeds, jnp.int32), PPOConfig().num_envs
    return {
        "PPO (training_key)": over(ppo_reset_keys, [training_key(s) for s in (*seeds, *PPO_RUN_SEEDS)], num_envs),
        "PPO summary's held-out episodes (train_many.EVAL_KEY)": runner_reset_keys(
            jax.random.PRNGKey(EVAL_KEY)[None], summary_episodes
        ),
        "time-to-policy checks (--eval-seed, + 1)": jnp.concatenate(
            [
                raw(runner_reset_keys(ttp_roots[0], ttp.cheap_episodes)),
                raw(runner_reset_keys(ttp_roots[1], ttp.full_episodes)),
            ]
        ),
        "RL selector": over(selector_reset_keys, [selector_key(s) for s in seeds], SelectorConfig().num_envs),
        "learned bot": over(bot_reset_keys, [learned_bot_key(s) for s in seeds], BOT_NUM_ENVS),
        "tag model's dataset parts": _data_resets(array, len(parts), data_config.episodes),
        "GRPO steps": _grpo_resets(array, grpo.steps, grpo.episodes),
        "glance steps": _glance_resets(array, glance_config.steps, len(glance_config.bots), glance_config.spawns),
        "coder's scoring episodes": _coder_resets(array, len(BOT_TYPES), ScoreConfig().episodes_per_bot),
    }


# -- the checks ----------------------------------------------------------------------------------------


def test_stream_constants_are_apart_and_the_modules_use_them():
    values = list(key_streams.STREAMS.values())
    assert len(set(values)) == len(values) and min(values) > len(BOT_TYPES)  # the protocol folds 0..2
    assert all(v < key_streams.GLANCE_STREAM for k, v in key_streams.STREAMS.items() if k != "GLANCE_STREAM")
    assert data.DATA_STREAM == key_streams.DATA_STREAM and glance.TRAINING_STREAM == key_streams.GLANCE_STREAM
    assert PRICING_STREAM not in values  # a cell's own sub-stream, folded into the cell key


def test_every_scenario_spawns_in_the_same_zones():
    """Positions are compared under one arena's zones: every scenario draws them in the same ones."""
    for name in SCENARIOS:
        _, params = jaxarena.make("Arena-v0", scenario=name)
        np.testing.assert_array_equal(params.npc_spawn, PARAMS.npc_spawn)
        np.testing.assert_array_equal(params.bot_spawn, PARAMS.bot_spawn)


def test_no_training_spawn_is_a_protocol_spawn(partitionable):
    found = {name: collisions(keys, partitionable)[:3] for name, keys in training_streams().items()}
    assert not any(found.values()), {name: hits for name, hits in found.items() if hits}


def test_the_check_sees_a_collision_where_there_is_one(partitionable):
    # Format-1 datasets keyed part p of seed s as fold_in(key(s), p): parts 0-2 of seed 0 are the protocol's
    # seed-0 cells, so each part's 64 episodes replay the first 64 of a cell (with partitionable keys).
    old_parts = jnp.stack([raw(jax.random.fold_in(jax.random.key(0), part))[0] for part in range(12)])
    hits = collisions(runner_reset_keys(old_parts, 64), partitionable)
    if partitionable:
        assert hits == [(0, bot, 1000, i) for bot in sorted(BOT_TYPES) for i in range(64)]
        # A trainer started from the bare seed key (here the learned bot's) replays a protocol spawn per seed.
        bare = over(bot_reset_keys, [jax.random.PRNGKey(s) for s in TRAINING_SEEDS], BOT_NUM_ENVS)
        assert collisions(bare, partitionable) == [(s, "balanced", 1000, 0) for s in TRAINING_SEEDS]
    else:
        # Without partitionable keys a split depends on its count: 64 episodes miss the protocol's 100 ...
        assert hits == []
        # ... and the same parts played for 100 episodes replay the seed-0 cells' 100.
        hits = collisions(runner_reset_keys(old_parts, 100), partitionable)
        assert hits == [(0, bot, 100, i) for bot in sorted(BOT_TYPES) for i in range(100)]


# -- the derivations above are the trainers' own ---------------------------------------------------------
# Checked with the original threefry, where split(k, n)[i] is not fold_in(k, i) and depends on n: an
# equality there pins the calls and the counts (partitionable keys run the same calls).


def test_the_core_init_resets_from_the_keys_derived_here():
    class Spy:
        def __init__(self, num_keys):
            self.num_keys, self.keys = num_keys, None

        def reset(self, *keys_and_hyper):
            self.keys = [np.asarray(k) for k in keys_and_hyper[:-1]]
            return jnp.zeros((4, 3)), jnp.zeros(4)

    config = CoreConfig(num_envs=4, num_steps=1, num_minibatches=1)
    with threefry(False):
        for num_keys in (1, 2):
            spy = Spy(num_keys)
            trainer = make_core_trainer(CoreEnv(num_keys, spy.reset, None, None), _Tiny(), config)
            trainer.init(training_key(3))  # eager: the spy sees the keys themselves
            np.testing.assert_array_equal(np.stack(spy.keys), np.stack(core_reset_keys(training_key(3), num_keys)))


class _Tiny(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return nn.Dense(2)(obs), jnp.zeros(obs.shape[:1])


def test_the_trainers_resets_spawn_where_the_derivations_say():
    from jaxarena.algorithms.ppo import arena_env
    from jaxarena.bot_arena import BotArena
    from jaxarena.llm.strategy_table import load_table
    from jaxarena.policies import random_policy
    from jaxarena.selector.decision_env import DecisionEnv
    from jaxarena.selector.population import make_population
    from jaxarena.wrappers import LogWrapper

    seed = 7
    with threefry(False):
        config = PPOConfig()
        arena, params = jaxarena.make(config.env_id, scenario=config.scenario)
        _, log_state = jax.jit(arena_env(config, LogWrapper(arena), params).reset)(
            *core_reset_keys(training_key(seed), 2), hyper_of(config)
        )
        got = np.concatenate(
            [np.asarray(log_state.env_state.npc_pos).reshape(config.num_envs, -1), log_state.env_state.bot_pos], 1
        )
        np.testing.assert_allclose(got, spawns(ppo_reset_keys(training_key(seed), config.num_envs)), atol=1e-5)

        # The squad never plays in a reset: a scripted stand-in serves for the shipped one.
        selector = SelectorConfig()
        arena, params = jaxarena.make("ArenaFormation-v0", scenario=selector.scenario)
        population = make_population(params, variants=True, learned_slots=0)
        env = DecisionEnv(
            arena, random_policy, None, population, load_table(selector.table), selector.inputs, selector.num_envs
        )
        _, state = jax.jit(env.reset)(*core_reset_keys(selector_key(seed), 1))
        lanes = state.lanes.arena
        got = np.concatenate([np.asarray(lanes.npc_pos).reshape(selector.num_envs, -1), lanes.bot_pos], 1)
        np.testing.assert_allclose(got, spawns(selector_reset_keys(selector_key(seed), selector.num_envs)), atol=1e-5)

        bots = BotArena(random_policy, None, params, BOT_NUM_ENVS, stagger=True)
        _, state = jax.jit(bots.reset)(*core_reset_keys(learned_bot_key(seed), 1))
        got = np.concatenate([np.asarray(state.env.npc_pos).reshape(BOT_NUM_ENVS, -1), state.env.bot_pos], 1)
        np.testing.assert_allclose(got, spawns(bot_reset_keys(learned_bot_key(seed), BOT_NUM_ENVS)), atol=1e-5)


# -- the keys themselves -----------------------------------------------------------------------------


def _evaluation_keys(seeds) -> set[tuple[int, ...]]:
    return {tuple(int(x) for x in cell_key_data(seed, bot)) for seed in seeds for bot in BOT_TYPES}


def _keys(keys) -> set[tuple[int, ...]]:
    return {tuple(int(x) for x in row) for row in np.asarray(raw(keys))}


def test_no_stream_start_of_any_seed_is_an_evaluation_key():
    config = DataConfig()
    parts = [config.part_index(b, sp, so) for b in BOT_TYPES for sp in SPLITS for so in SOURCES]
    assert sorted(parts) == list(range(len(parts)))  # every part, once
    training = _keys(jnp.stack([raw(part_key(seed, part))[0] for seed in range(10) for part in parts]))
    assert len(training) == 10 * len(parts)
    training |= _keys(jnp.stack([raw(grpo_key(seed))[0] for seed in range(10)]))
    training |= _keys(jnp.stack([glance.training_key(seed, step) for seed in range(10) for step in range(0, 400, 7)]))
    training |= _keys(
        jnp.stack([key_streams.stream_key(seed, v) for seed in range(100) for v in key_streams.STREAMS.values()])
    )
    assert not training & _evaluation_keys(range(100))


def test_the_key_check_sees_a_collision_where_there_is_one():
    # The keys the dataset used before its stream constant: part p of seed s was fold_in(key(s), p),
    # and parts 0-2 of seed 0 were the protocol's seed-0 cells.
    assert _keys(
        jnp.stack([raw(jax.random.fold_in(jax.random.key(0), part))[0] for part in range(3)])
    ) <= _evaluation_keys([0])

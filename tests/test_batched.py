"""`BatchedArena` plays `Arena.step`'s rules: the same draws, the same ticks to rounding, the same outcome rates.

Its float order differs from the vmapped step's in the last bits, so the checks are: resets bit
for bit; a short rollout tick by tick (every integer and boolean field equal, floats to 1e-3); and,
slow, the outcome counts of over 10,000 episodes (tests/test_invariants.py runs the invariants on it).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.batched import BatchedArena, batch_first, batch_last


def random_rollout(env, params, n: int, ticks: int, seed: int, batched: bool):
    """Per tick (obs, batch-first state, reward, done, info) from `n` arenas under uniform random actions."""
    keys = jax.random.split(jax.random.key(seed), n)
    arena = BatchedArena(env)
    step = arena.step if batched else jax.vmap(env.step, in_axes=(0, 0, 0, None))
    layout = batch_first if batched else (lambda state: state)

    @jax.jit
    def run():
        _, state = arena.reset(keys, params) if batched else jax.vmap(env.reset, in_axes=(0, None))(keys, params)

        def tick(state, t):
            actions = jax.random.randint(jax.random.fold_in(jax.random.key(seed + 1), t), (n, 5), 0, 6)
            obs, state, reward, done, info = step(keys, state, actions, params)
            return state, (obs, layout(state), reward, done, info)

        return jax.lax.scan(tick, state, jnp.arange(ticks))[1]

    return jax.tree.map(np.asarray, run())


@pytest.mark.parametrize("keys", ["typed", "legacy"])
def test_the_reset_draws_the_vmapped_episodes_bit_for_bit(keys):
    env, params = jaxarena.make("Arena-v0", bot="balanced")
    batch = jax.random.split(jax.random.key(3), 64)
    if keys == "legacy":
        batch = jax.random.key_data(batch)
    obs, state = BatchedArena(env).reset(batch, params)
    ref_obs, ref_state = jax.vmap(env.reset, in_axes=(0, None))(batch, params)
    chex.assert_trees_all_equal(batch_first(state), ref_state)
    chex.assert_trees_all_equal(obs, ref_obs)


@pytest.mark.parametrize(
    "bot,knobs",
    [
        pytest.param("aggressive", {}, marks=pytest.mark.slow),
        pytest.param("evasive", {}, marks=pytest.mark.slow),
        ("balanced", {}),
        # A knob of the rules beyond Table 1, which both layouts read.
        pytest.param("aggressive", {"orb_min_range": 4.0}, marks=pytest.mark.slow),
    ],
)
def test_a_short_rollout_matches_the_vmapped_step_tick_by_tick(bot, knobs):
    env, params = jaxarena.make("Arena-v0", bot=bot, shaping_weight=1.0, **knobs)  # Table 5's shaping paid too
    params = params.replace(episode_s=1.5)  # every arena times out and resets inside the window
    ref = random_rollout(env, params, n=32, ticks=25, seed=0, batched=False)
    mine = random_rollout(env, params, n=32, ticks=25, seed=0, batched=True)
    for path, a, b in zip(
        jax.tree_util.tree_leaves_with_path(ref), jax.tree.leaves(ref), jax.tree.leaves(mine), strict=True
    ):
        chex.assert_equal_shape([a, b])
        if a.dtype.kind in "biu":
            np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path[0]))
        else:
            np.testing.assert_allclose(a, b, atol=1e-3, rtol=0, err_msg=jax.tree_util.keystr(path[0]))
    assert ref[3].any(), "no episode ended: the comparison never crossed an auto-reset"


def test_it_refuses_what_it_does_not_play():
    env, params = jaxarena.make("Arena-v0")
    with pytest.raises(ValueError, match="ArenaFormation-v0 is not supported"):
        BatchedArena(jaxarena.make("ArenaFormation-v0")[0])
    keys = jax.random.split(jax.random.key(0), 4)
    with pytest.raises(ValueError, match="shaping_recipe < 1, got 2"):
        BatchedArena(env).reset(keys, params.replace(shaping_recipe=2))
    with pytest.raises(ValueError, match="bot_type < 3, got 3"):
        BatchedArena(env).reset(keys, params.replace(bot_type=3))
    with pytest.raises(ValueError, match="batch_last"):  # vmapped params passed batch-first
        BatchedArena(env).reset(keys, jax.vmap(lambda b: params.replace(bot_type=b))(jnp.arange(4) % 3))
    with pytest.raises(TypeError, match="N PRNG keys"):
        BatchedArena(env).reset(jnp.arange(4), params)
    _, state = BatchedArena(env).reset(keys, params)
    with pytest.raises(ValueError, match=r"needs actions of shape \(4, 5\) and 4 keys, got actions \(1, 5\)"):
        BatchedArena(env).step(keys, state, jnp.zeros((1, 5), jnp.int32), params)
    with pytest.raises(ValueError, match="and 4 keys, got actions \\(4, 5\\) and 1 keys"):
        BatchedArena(env).step(keys[:1], state, jnp.zeros((4, 5), jnp.int32), params)
    with pytest.raises(TypeError, match="actions must be integers"):
        BatchedArena(env).step(keys, state, jnp.full((4, 5), 5.7), params)
    # A concrete action env.step refuses is refused here too, with the same words.
    for bad in (7, -1):
        actions = np.zeros((4, 5), np.int32)
        actions[2, 3] = bad
        with pytest.raises(ValueError, match=rf"each NPC's action \(Table 4\) must be in 0..5, got {bad}"):
            BatchedArena(env).step(keys, state, actions, params)
        with pytest.raises(ValueError, match=rf"must be in 0..5, got {bad}"):
            env.step(keys[0], jax.tree.map(lambda x: x[..., 0], state), actions[2], params)


def test_a_traced_unsupported_recipe_pays_nan_not_a_wrong_reward():
    env, params = jaxarena.make("Arena-v0")
    keys = jax.random.split(jax.random.key(0), 4)
    arena = BatchedArena(env)
    _, state = arena.reset(keys, params)
    step = jax.jit(arena.step)  # params traced: the recipe cannot be checked at trace time
    actions = jnp.zeros((4, 5), jnp.int32)
    reward = step(keys, state, actions, params.replace(shaping_recipe=jnp.int32(1)))[2]
    assert np.all(np.isnan(reward))
    assert np.all(np.isfinite(step(keys, state, actions, params)[2]))


def outcome_counts(n: int, ticks: int, batched: bool) -> np.ndarray:
    """(bot, outcome) counts of the episodes `n` arenas, a third per bot type, finish in `ticks` of random play."""
    env, base = jaxarena.make("Arena-v0")
    params = jax.vmap(lambda b: base.replace(bot_type=b))(jnp.arange(n) % 3)
    arena = BatchedArena(env)
    step = arena.step if batched else jax.vmap(env.step)
    params = batch_last(params) if batched else params
    keys = jax.random.split(jax.random.key(7), n)

    @jax.jit
    def run():
        _, state = arena.reset(keys, params) if batched else jax.vmap(env.reset)(keys, params)

        def tick(carry, t):
            state, counts = carry
            actions = jax.random.randint(jax.random.fold_in(jax.random.key(8), t), (n, 5), 0, 6)
            _, state, _, _, info = step(keys, state, actions, params)
            bot = jnp.arange(n) % 3
            ended = jnp.stack([(info["outcome"] == o) & (bot == b) for b in range(3) for o in (1, 2, 3)])
            return (state, counts + ended.sum(-1)), None

        return jax.lax.scan(tick, (state, jnp.zeros(9, jnp.int32)), jnp.arange(ticks))[0][1]

    return np.asarray(run()).reshape(3, 3)


@pytest.mark.slow
def test_the_outcome_rates_of_10000_episodes_agree():
    stats = pytest.importorskip("scipy.stats")  # the env-only install has no scipy
    ref, mine = (outcome_counts(3072, 3000, batched) for batched in (False, True))
    assert ref.sum() >= 10_000
    for bot in range(3):  # per bot, outcomes (win, loss, timeout) from the two steps
        table = np.stack([ref[bot], mine[bot]])
        table = table[:, table.sum(0) > 0]
        if table.shape[1] > 1:
            assert stats.chi2_contingency(table).pvalue > 0.01, (bot, table)
        np.testing.assert_allclose(mine[bot], ref[bot], rtol=0.05, atol=20)


def test_a_batch_first_state_is_refused_with_the_conversion():
    env, params = jaxarena.make("Arena-v0")
    keys = jax.random.split(jax.random.key(0), 4)
    actions = jnp.zeros((4, 5), jnp.int32)
    arena = BatchedArena(env)
    _, first = jax.vmap(env.reset, in_axes=(0, None))(keys, params)  # what a vmapped env carries
    want = r"batch-last.*batch-first \(npc_pos \(4, 5, 2\).*jaxarena\.batched\.batch_last\(state\)"
    with pytest.raises(ValueError, match=want):
        arena.step(keys, first, actions, params)
    with pytest.raises(ValueError, match=want):  # shapes are static: refused under jit too
        jax.jit(arena.step)(keys, first, actions, params)
    with pytest.raises(ValueError, match=r"a batch-last state of N arenas"):  # one arena's state
        arena.step(keys, jax.tree.map(lambda x: x[0], first), actions, params)
    arena.step(keys, batch_last(first), actions, params)  # converted, it steps


def test_an_env_id_builds_the_batched_arena_and_anything_else_is_named():
    env, params = jaxarena.make("Arena-v0")
    keys = jax.random.split(jax.random.key(0), 4)
    arena = BatchedArena("Arena-v0")  # an id, as jaxarena.make takes it
    assert arena.env.env_id == "Arena-v0"
    chex.assert_trees_all_equal(arena.reset(keys, params), BatchedArena(env).reset(keys, params))
    with pytest.raises(ValueError, match="ArenaFacing-v0 is not supported"):
        BatchedArena("ArenaFacing-v0")
    with pytest.raises(ValueError, match="unknown env id 'Arena-v9'"):
        BatchedArena("Arena-v9")
    with pytest.raises(TypeError, match=r"jaxarena\.make returns \(env, params\)"):
        BatchedArena(jaxarena.make("Arena-v0"))

"""The learned bot: its view, its moves, the arena's learned lanes, make's checks, and BotArena."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import SPREAD, build_state

import jaxarena
from jaxarena.bot_arena import BotArena, BotArenaState
from jaxarena.learned_bot import (
    BOT_OBS_SIZE,
    HOLD,
    NPC_FEATURES,
    NUM_BOT_ACTIONS,
    SELF_FEATURES,
    bot_heading,
    bot_logits,
    bot_observation,
    init_bot_weights,
)
from jaxarena.names import BOT_LEARNED, MELEE
from jaxarena.policies import random_policy


def decisive(key, gain=300.0):
    """Random weights with a sharp output layer, so the bot commits to headings instead of dithering."""
    w = init_bot_weights(key)
    return w.replace(w2=w.w2 * gain)


def stand_and_strike(params, obs, key):
    """A squad that never moves and melees whatever is in range."""
    return jnp.full(obs.shape[:-1], MELEE, jnp.int32)


# -- observation and actions -------------------------------------------------


def test_observation_shape_range_and_order():
    env, params = jaxarena.make("Arena-v0")
    _, states = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), 32), params)
    obs = jax.jit(jax.vmap(bot_observation, in_axes=(0, None)))(states, params)
    chex.assert_shape(obs, (32, BOT_OBS_SIZE))
    chex.assert_type(obs, jnp.float32)
    chex.assert_tree_all_finite(obs)
    assert np.all(np.abs(np.asarray(obs)) <= 1.0 + 1e-6)

    # NPC 3 nearest, NPC 1 dead: the nearest living comes first, the dead row is last and all zeros.
    npc = SPREAD.copy()
    npc[3] = [15.0, 22.0]
    npc[1] = [15.0, 23.0]  # nearer than NPC 3, but dead
    state = build_state(params, npc, [15.0, 25.0], npc_hp=jnp.array([60.0, 0.0, 60.0, 30.0, 60.0]))
    rows = np.asarray(bot_observation(state, params))[SELF_FEATURES:].reshape(5, NPC_FEATURES)
    np.testing.assert_allclose(rows[0, :5], [0.0, -3.0 / 30.0, 3.0 / (30.0 * np.sqrt(2.0)), 1.0, 0.5], rtol=1e-5)
    assert rows[0, 5] == 1.0 and rows[0, 6] == 0.0  # within the bot's 3.0 u reach, outside an NPC's 2.5 u
    np.testing.assert_array_equal(rows[-1], 0.0)
    dist = rows[:4, 2]
    assert np.all(np.diff(dist) >= 0.0)


def test_headings_are_the_compass_and_hold_is_still():
    h = np.asarray(bot_heading(jnp.arange(-1, NUM_BOT_ACTIONS + 1)))
    np.testing.assert_allclose(h[1 + 0], [1.0, 0.0], atol=1e-6)  # east
    np.testing.assert_allclose(h[1 + 2], [0.0, 1.0], atol=1e-6)  # north
    np.testing.assert_allclose(h[1 + 4], [-1.0, 0.0], atol=1e-6)  # west
    np.testing.assert_allclose(h[1 + 6], [0.0, -1.0], atol=1e-6)  # south
    np.testing.assert_allclose(np.linalg.norm(h[1 : 1 + 8], axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(h[[0, 1 + HOLD, -1]], 0.0)  # -1, hold, 9


def test_bot_action_drives_only_learned_lanes():
    env, params = jaxarena.make("Arena-v0", bot="aggressive")
    state = build_state(params, SPREAD, [15.0, 25.0])
    hold = jnp.full((5,), MELEE, jnp.int32)
    learned = params.replace(bot_type=BOT_LEARNED)
    step = jax.jit(env.step_env)
    moved, *_ = step(jax.random.key(0), state, hold, learned, bot_action=jnp.int32(2))
    np.testing.assert_allclose(moved.bot_pos - state.bot_pos, [0.0, params.bot_speed * params.dt], atol=1e-6)
    # A scripted bot ignores the action: the same tick as without it.
    scripted, *_ = step(jax.random.key(0), state, hold, params, bot_action=jnp.int32(2))
    plain, *_ = step(jax.random.key(0), state, hold, params)
    chex.assert_trees_all_equal(scripted, plain)
    with pytest.raises(TypeError, match="bot_action"):
        env.step_env(jax.random.key(0), state, hold, learned, bot_action=jnp.float32(2.0))


# -- the arena with learned lanes ---------------------------------------------


def test_learned_bot_moves_within_its_speed_over_long_rollouts():
    env, params = jaxarena.make("Arena-v0", bot="learned", bot_weights=decisive(jax.random.key(1)))
    n, t = 16, 1500
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    @jax.jit
    def run(key):
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, n), params)

        def tick(state, key):
            k_act, k_step = jax.random.split(key)
            act = random_policy(None, jnp.zeros((n, 5, 1)), k_act)
            _, nxt, _, done, _ = step(jax.random.split(k_step, n), state, act, params)
            return nxt, (state.bot_pos, nxt.bot_pos, done, nxt.bot_mode)

        return jax.lax.scan(tick, state, jax.random.split(key, t))[1]

    before, after, done, mode = jax.tree.map(np.asarray, run(jax.random.key(2)))
    stride = np.linalg.norm(after - before, axis=-1)[~done]
    assert stride.max() <= params.bot_speed * params.dt + 1e-5
    assert stride.mean() > 0.5 * params.bot_speed * params.dt  # it does move: the check is not vacuous
    r, size, boxes = params.unit_radius, params.arena_size, np.asarray(params.boxes)
    pos = after.reshape(-1, 2)
    assert np.all(pos >= r - 1e-4) and np.all(pos <= size - r + 1e-4)
    closest = np.clip(pos[:, None, :], boxes[:, :2], boxes[:, 2:])
    assert np.all(np.linalg.norm(pos[:, None, :] - closest, axis=-1) >= r - 1e-3)
    assert set(np.unique(mode)) == {0, 1}  # its behavioural mode label: closing in and opening up both occur


def _trajectory(env, params, n_ticks=60, seed=3):
    """Bot positions of one arena over `n_ticks` of the public step, NPCs random."""

    def run(params):
        _, state = env.reset(jax.random.key(seed), params)

        def tick(state, key):
            k_act, k_step = jax.random.split(key)
            _, state, *_ = env.step(k_step, state, random_policy(None, jnp.zeros((5, 1)), k_act), params)
            return state, state.bot_pos

        return jax.lax.scan(tick, state, jax.random.split(jax.random.key(seed + 1), n_ticks))[1]

    return run


def test_one_batch_mixes_learned_and_scripted_lanes():
    env, base = jaxarena.make("Arena-v0")
    bot_types = jnp.array([0, 1, 2, BOT_LEARNED, BOT_LEARNED, BOT_LEARNED])
    weights = jax.vmap(decisive)(jax.random.split(jax.random.key(5), 6))
    batch = jax.vmap(lambda b, w: base.replace(bot_type=b, bot_weights=w))(bot_types, weights)
    run = _trajectory(env, base)
    lanes = np.asarray(jax.jit(jax.vmap(run))(batch))
    alone = jax.jit(run)
    for i, b in enumerate(np.asarray(bot_types)):
        own = base.replace(bot_type=int(b), bot_weights=jax.tree.map(lambda x, i=i: x[i], weights))
        np.testing.assert_allclose(lanes[i], np.asarray(alone(own)), atol=1e-4)
        if b != BOT_LEARNED:  # a scripted lane is the scripted bot, weights or not
            np.testing.assert_allclose(lanes[i], np.asarray(alone(base.replace(bot_type=int(b)))), atol=1e-4)
    # The learned lanes play their own weights.
    assert np.abs(lanes[3] - lanes[4]).max() > 1.0 and np.abs(lanes[4] - lanes[5]).max() > 1.0


def test_default_params_do_not_trace_the_learned_bot():
    env, params = jaxarena.make("Arena-v0")
    assert params.bot_weights is None and jax.tree.leaves(params.bot_weights) == []
    state = env.reset(jax.random.key(0), params)[1]
    acts = jnp.zeros((5,), jnp.int32)

    def eqns(p):
        return len(jax.make_jaxpr(env.step_env)(jax.random.key(0), state, acts, p).jaxpr.eqns)

    with_weights = params.replace(bot_weights=init_bot_weights(jax.random.key(0)))
    assert eqns(params) < eqns(with_weights)  # the learned branch exists only when asked for
    # And weights on a scripted lane leave its trajectory bit-identical.
    run = jax.jit(_trajectory(env, params))
    for b in range(3):
        chex.assert_trees_all_equal(run(params.replace(bot_type=b)), run(with_weights.replace(bot_type=b)))


def test_learned_bot_samples_from_its_logits():
    # Weights whose only preference is action 2 (north): the bot walks north from its spawn.
    w = init_bot_weights(jax.random.key(0))
    w = jax.tree.map(jnp.zeros_like, w).replace(b2=jnp.zeros((NUM_BOT_ACTIONS,)).at[2].set(50.0))
    assert int(jnp.argmax(bot_logits(w, jnp.zeros(BOT_OBS_SIZE)))) == 2
    env, params = jaxarena.make("Arena-v0", bot="learned", bot_weights=w, bot_spawn=[14.0, 20.0, 16.0, 21.0])
    pos = np.asarray(jax.jit(_trajectory(env, params, n_ticks=12))(params))  # 6 u: short of the wall
    np.testing.assert_allclose(np.diff(pos[:, 1]), params.bot_speed * params.dt, atol=1e-5)
    np.testing.assert_allclose(np.diff(pos[:, 0]), 0.0, atol=1e-6)


def test_make_checks_the_learned_bot():
    w = init_bot_weights(jax.random.key(0))
    env, params = jaxarena.make("Arena-v0", bot="learned", bot_weights=w)
    assert int(params.bot_type) == BOT_LEARNED
    chex.assert_trees_all_equal(params.bot_weights, w)
    # The dict of earlier releases still builds the same typed weights.
    as_dict = {name: getattr(w, name) for name in type(w).__dataclass_fields__}
    _, from_dict = jaxarena.make("Arena-v0", bot="learned", bot_weights=as_dict)
    assert type(from_dict.bot_weights) is type(w)
    chex.assert_trees_all_equal(from_dict.bot_weights, w)
    assert int(jaxarena.make("Arena-v0", bot_type=BOT_LEARNED, bot_weights=w)[1].bot_type) == BOT_LEARNED
    with pytest.raises(ValueError, match="needs bot_weights"):
        jaxarena.make("Arena-v0", bot="learned")
    with pytest.raises(ValueError, match="needs bot_weights"):
        jaxarena.make("Arena-v0", bot_type=3)
    with pytest.raises(ValueError, match="learned"):
        jaxarena.make("Arena-v0", bot=4)
    with pytest.raises(TypeError, match="keys"):
        jaxarena.make("Arena-v0", bot="learned", bot_weights={"w0": w.w0})
    with pytest.raises(ValueError, match="shape"):
        jaxarena.make("Arena-v0", bot="learned", bot_weights=w.replace(w2=w.w2[:, :6]))
    with pytest.raises(ValueError, match="non-finite"):
        jaxarena.make("Arena-v0", bot="learned", bot_weights=w.replace(b0=w.b0.at[0].set(jnp.nan)))
    # Weights beside a scripted bot are allowed (a batch may vmap bot_type over them).
    assert jaxarena.make("Arena-v0", bot="evasive", bot_weights=w)[1].bot_weights is not None


# -- BotArena -----------------------------------------------------------------


def _arena_at(state, num_envs=1, **kw):
    """A BotArena whose squad stands and strikes, started from the hand-built `state` in every lane."""
    _, params = jaxarena.make("Arena-v0", bot="aggressive")
    env = BotArena(stand_and_strike, None, params, num_envs, **kw)
    batch = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_envs,) + x.shape), state)
    squad_obs = jax.vmap(env.arena.observe, in_axes=(0, None))(batch, env.params)
    return env, BotArenaState(batch, squad_obs, jnp.zeros((num_envs,), jnp.float32))


@pytest.fixture(scope="module")
def one_tick():
    """`tick(**state fields) -> (env, obs, next state, reward, done, info)` of one arena, the bot holding."""
    _, params = jaxarena.make("Arena-v0")
    env, _ = _arena_at(build_state(params))
    step = jax.jit(env.step)

    def tick(npc2=None, **fields):
        npc = SPREAD.copy()
        if npc2 is not None:
            npc[2] = npc2
        _, bstate = _arena_at(build_state(params, npc, [15.0, 25.0], **fields))
        obs, nxt, reward, done, info = step(jax.random.key(0), bstate, jnp.array([HOLD], jnp.int32))
        return env, obs, nxt, float(reward[0]), bool(done[0]), {k: float(v[0]) for k, v in info.items()}

    return tick


def test_bot_arena_reward_signs(one_tick):
    # The bot strikes an NPC at 2.8 u (inside its 3.0 u reach, outside the NPC's 2.5 u): + 15/300.
    *_, reward, done, _ = one_tick(npc2=[15.0, 22.2])
    assert reward == pytest.approx(15.0 / 300.0) and not done
    # The NPC at 2.0 u strikes while the bot's melee cools down: - 15/300.
    *_, reward, done, _ = one_tick(npc2=[15.0, 23.0], bot_melee_cd=5)
    assert reward == pytest.approx(-15.0 / 300.0) and not done
    # Killed: the damage term and the -1.
    *_, reward, done, info = one_tick(npc2=[15.0, 23.0], bot_melee_cd=5, bot_hp=10.0)
    assert reward == pytest.approx(-10.0 / 300.0 - 1.0) and done and info["npc_win"] == 1.0
    # The last NPC falls: the damage term and the +1.
    hp = jnp.array([0.0, 0.0, 10.0, 0.0, 0.0])
    *_, reward, done, info = one_tick(npc2=[15.0, 22.2], npc_hp=hp)
    assert reward == pytest.approx(10.0 / 300.0 + 1.0) and done and info["bot_win"] == 1.0
    assert info["damage_dealt"] == 10.0 and info["timeout"] == 0.0


def test_bot_arena_auto_resets_and_reports_the_finished_episode(one_tick):
    hp = jnp.array([0.0, 0.0, 10.0, 0.0, 0.0])
    env, obs, nxt, _, done, info = one_tick(npc2=[15.0, 22.2], npc_hp=hp, t=300)
    assert done and info["episode_s"] == pytest.approx(30.1)
    assert int(nxt.env.t[0]) == 0 and int(nxt.env.episode[0]) == 1
    np.testing.assert_array_equal(nxt.env.npc_hp[0], env.params.npc_hp)
    assert float(nxt.episode_return[0]) == 0.0
    chex.assert_trees_all_close(obs[0], bot_observation(jax.tree.map(lambda x: x[0], nxt.env), env.params))
    assert info["episode_return"] == pytest.approx(10.0 / 300.0 + 1.0)


def test_bot_arena_redraws_the_squad_tag_each_decision_period():
    _, params = jaxarena.make("Arena-v0")
    env = BotArena(stand_and_strike, None, params, 8)
    obs, state = env.reset(jax.random.key(0))
    chex.assert_shape(obs, (8, BOT_OBS_SIZE))

    @jax.jit
    def run(state, key):
        def tick(state, key):
            obs, state, reward, done, info = env.step(key, state, jnp.full((8,), HOLD, jnp.int32))
            # The squad's observation carries the tag in force (retagged together).
            tag_slot = jnp.round(state.squad_obs[:, 0, 22] * 3).astype(jnp.int32)
            return state, (state.env.tag, tag_slot, state.env.t, reward, done)

        return jax.lax.scan(tick, state, jax.random.split(key, 240))[1]

    tag, slot, t, reward, done = jax.tree.map(np.asarray, run(state, jax.random.key(1)))
    np.testing.assert_array_equal(tag, slot)
    changed = np.diff(tag, axis=0) != 0
    assert changed.any() and np.all(t[1:][changed] % 50 == 1)  # only on a period's first tick
    assert len(np.unique(tag)) == 4
    assert not done.any() and np.all(reward == 0.0)  # nobody in reach: nothing happens, nothing is paid


def test_bot_arena_shaping_is_potential_based():
    # Walking straight at the squad is paid; the sum telescopes to the potentials' difference.
    _, params = jaxarena.make("Arena-v0")
    npc = SPREAD.copy()
    npc[2] = [15.0, 10.0]
    state = build_state(params, npc, [15.0, 25.0])
    env, bstate = _arena_at(state, approach_shaping=1.0, gamma=1.0)
    south = jnp.array([6], jnp.int32)

    def tick(bstate, key):
        _, bstate, reward, _, _ = env.step(key, bstate, south)
        return bstate, reward[0]

    total = float(
        jnp.sum(jax.jit(jax.lax.scan, static_argnums=0)(tick, bstate, jax.random.split(jax.random.key(0), 10))[1])
    )
    diag = 30.0 * np.sqrt(2.0)
    assert total == pytest.approx(10 * params.bot_speed * params.dt / diag, rel=1e-4)


def test_bot_arena_rejects_bad_input():
    _, params = jaxarena.make("Arena-v0")
    with pytest.raises(ValueError, match="num_envs"):
        BotArena(stand_and_strike, None, params, 0)
    with pytest.raises(ValueError, match="tags"):
        BotArena(stand_and_strike, None, params, 2, tags=(4,))
    with pytest.raises(ValueError, match="env id"):
        BotArena(stand_and_strike, None, params, 2, env_id="Arena-v9")
    env = BotArena(stand_and_strike, None, params, 2)
    _, state = env.reset(jax.random.key(0))
    with pytest.raises(ValueError, match="action must be int32 of shape"):
        env.step(jax.random.key(0), state, jnp.zeros((3,), jnp.int32))


def test_an_unbatched_bot_arena_plays_lane_zero_of_a_batch_of_one():
    _, params = jaxarena.make("Arena-v0", scenario="brute")
    batched = BotArena(random_policy, None, params, 1, approach_shaping=1.0)
    single = BotArena(random_policy, None, params, None, approach_shaping=1.0)
    assert single.observation_space().shape == (BOT_OBS_SIZE,) and single.action_space().shape == ()
    assert batched.observation_space().shape == (1, BOT_OBS_SIZE) and batched.action_space().shape == (1,)
    params = single.default_params
    obs_b, state_b = batched.reset(jax.random.key(0), params)
    obs_s, state_s = single.reset(jax.random.key(0), params)
    lane0 = lambda tree: jax.tree.map(lambda x: x[0], tree)  # noqa: E731
    chex.assert_trees_all_equal(lane0((obs_b, state_b)), (obs_s, state_s))
    step_b, step_s = jax.jit(batched.step), jax.jit(single.step)
    for t in range(30):  # the same draws; floats may differ in the last bit, as the two programs fuse differently
        action = jnp.int32(t % NUM_BOT_ACTIONS)
        out_b = step_b(jax.random.key(t), state_b, action[None], params)
        out_s = step_s(jax.random.key(t), state_s, action, params)
        chex.assert_trees_all_close(lane0(out_b), out_s, rtol=1e-5, atol=1e-5)
        state_b, state_s = out_b[1], out_s[1]


def test_make_bot_arena_needs_a_squad_and_keeps_the_bot_learned():
    with pytest.raises(TypeError, match=r"BotArena-v0 needs the frozen squad.*squad="):
        jaxarena.make("BotArena-v0")
    with pytest.raises(ValueError, match="bot is the learner"):
        jaxarena.make("BotArena-v0", squad=(stand_and_strike, None), bot="aggressive")
    with pytest.raises(ValueError, match="unknown scenario"):
        jaxarena.make("BotArena-v0", squad=(stand_and_strike, None), scenario="nowhere")
    env, params = jaxarena.make("BotArena-v0", squad=(stand_and_strike, None), scenario="raid", npc_speed=3.0)
    assert isinstance(env, BotArena) and not env.batched and env.name == "BotArena-v0"
    assert int(params.bot_type) == BOT_LEARNED and params.bot_weights is None
    assert float(params.episode_s) == 48.0 and float(params.npc_speed) == 3.0
    # A shipped squad by name reads its own arena variant.
    env, params = jaxarena.make("BotArena-v0", squad="B-paper")
    assert env.arena.env_id == env.squad_policy.env_id
    obs, state = env.reset(jax.random.key(0), params)
    chex.assert_shape(obs, (BOT_OBS_SIZE,))
    with pytest.raises(ValueError, match=r"the bot's action must be in 0\.\.8, got 9"):
        env.step(jax.random.key(1), state, 9, params)

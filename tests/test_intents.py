"""The intent measures of each tag, and the env paying the "intent" shaping recipe (its terms: test_formations.py)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import build_state

import jaxarena
from jaxarena.analysis.intents import INTENTS, MEASURES, coverage, episode_measures, tick_measures
from jaxarena.names import NPC_WIN
from jaxarena.policies import focus_fire_policy
from jaxarena.runner import Tick, make_runner

BOT = np.array([15.0, 15.0], np.float32)
FACING_EAST = jnp.array([1.0, 0.0])


def ring(radius, angles_deg):
    a = np.deg2rad(np.asarray(angles_deg, np.float32))
    return BOT + radius * np.stack([np.cos(a), np.sin(a)], axis=-1)


ALL_ALIVE = jnp.ones(5, bool)


def test_coverage_is_one_evenly_around_and_near_zero_on_one_side():
    even = coverage(jnp.asarray(ring(3.0, [0, 72, 144, 216, 288])), jnp.asarray(BOT), ALL_ALIVE)
    side = coverage(jnp.asarray(ring(3.0, [-4, -2, 0, 2, 4])), jnp.asarray(BOT), ALL_ALIVE)
    assert float(even) == pytest.approx(1.0, abs=1e-5)
    assert float(side) == pytest.approx(8 / 288, abs=1e-4)  # the ring spans 8 of 360 degrees
    # Dead NPCs do not count: the two living ones opposite each other cover fully.
    alive = jnp.array([True, False, False, True, False])
    assert float(coverage(jnp.asarray(ring(3.0, [0, 10, 20, 180, 30])), jnp.asarray(BOT), alive)) == pytest.approx(1.0)
    assert float(coverage(jnp.asarray(ring(3.0, [0] * 5)), jnp.asarray(BOT), jnp.zeros(5, bool))) == 0.0
    # Two flanking groups (3 and 2 NPCs at +-90 deg) leave a 180 deg way out: partly closed.
    flanks = coverage(jnp.asarray(ring(3.0, [85, 90, 95, -88, -92])), jnp.asarray(BOT), ALL_ALIVE)
    assert 0.55 < float(flanks) < 0.7


def test_tick_measures_on_a_hand_built_state():
    params = jaxarena.make("Arena-v0")[1]
    # Two NPCs at the bot's sides (90 deg, 3 u), one ahead (3 u), one behind and one at its side at 10 u.
    npc = np.concatenate([ring(3.0, [90, -90, 0]), ring(10.0, [180, 100])])
    state = build_state(params, npc_pos=npc, bot_pos=BOT, bot_facing=FACING_EAST)
    m = tick_measures(state, ALL_ALIVE)
    assert int(m["npc_ticks"]) == 5
    assert int(m["lateral_share"]) == 3
    assert int(m["flank_share"]) == 2  # the side NPC 10 u off is not in the fight
    assert int(m["far_share"]) == 2
    assert float(m["distance"]) == pytest.approx(29.0, rel=1e-5)
    # At exactly Retreat's 8 u an NPC at the side counts as far, not flanking: the two never share an NPC-tick.
    on_line = build_state(params, npc_pos=ring(8.0, [90, 90, -90, 0, 180]), bot_pos=BOT, bot_facing=FACING_EAST)
    m = tick_measures(on_line, ALL_ALIVE)
    assert (int(m["flank_share"]), int(m["far_share"]), int(m["lateral_share"])) == (0, 5, 3)


def test_the_intents_accumulator_averages_over_an_episode():
    env, params = jaxarena.make("Arena-v0", bot="aggressive", episode_s=5.0)
    run = make_runner(env, params, focus_fire_policy, 1, num_episodes=4, accumulators={"intents": INTENTS})
    measures = episode_measures(run(None, params, jax.random.key(0)).extras["intents"], params.dt)
    chex.assert_shape([measures[m] for m in MEASURES], (4,))
    chex.assert_tree_all_finite(measures)
    assert np.all((np.asarray(measures["coverage"]) >= 0) & (np.asarray(measures["coverage"]) <= 1))
    assert np.all(np.asarray(measures["distance"]) > 0)


def test_damage_rate_is_the_fights_damage_over_its_seconds_killing_blow_included():
    # A harmless, standing bot and a melee-only squad: nothing lands before the fight starts at 8 u.
    env, params = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, bot_melee_damage=0.0, episode_s=30.0)
    run = make_runner(env, params, focus_fire_policy, 1, num_episodes=8, accumulators={"intents": INTENTS})
    result = run(None, params, jax.random.key(0))
    acc = result.extras["intents"]
    assert np.all(np.asarray(result.outcome) == NPC_WIN)
    # Every HP of the bot, the killing blow included, is in the fight's damage, and the walk-in is not in its time.
    np.testing.assert_allclose(np.asarray(acc["fight"]["damage"]), params.bot_hp, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(acc["all"]["damage"]), np.asarray(result.damage_dealt), rtol=1e-5)
    fight_ticks, all_ticks = np.asarray(acc["fight"]["ticks"]), np.asarray(acc["all"]["ticks"])
    assert np.all(fight_ticks < all_ticks)
    rate = np.asarray(episode_measures(acc, params.dt)["damage_rate"])
    np.testing.assert_allclose(rate, params.bot_hp / (fight_ticks * params.dt), rtol=1e-5)
    # A tick's dt scales the rate: the same sums at half the tick length are twice the rate.
    np.testing.assert_allclose(np.asarray(episode_measures(acc, params.dt / 2)["damage_rate"]), 2 * rate, rtol=1e-5)


def test_the_intents_accumulator_adds_no_damage_from_a_tick_after_the_episode_ended():
    params = jaxarena.make("Arena-v0")[1]
    before = build_state(params, npc_pos=ring(3.0, [0, 72, 144, 216, 288]), bot_pos=BOT)
    after = before.replace(damage_dealt=before.damage_dealt + 15.0)

    def tick(running):
        batch = lambda s: jax.tree.map(lambda x: jnp.stack([x, x]), s)  # noqa: E731
        return Tick(None, batch(before), None, batch(after), None, None, None, jnp.array(running))

    acc = INTENTS.update(INTENTS.init(2), tick([True, False]))
    np.testing.assert_allclose(np.asarray(acc["all"]["damage"]), [15.0, 0.0])
    np.testing.assert_allclose(np.asarray(acc["fight"]["damage"]), [15.0, 0.0])  # 3 u off: the fight is on


def test_the_env_pays_the_recipe_it_is_given():
    env, paper = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, shaping_weight=1.0)
    intent = paper.replace(shaping_recipe=1)
    npc = ring(20.0, [0, 72, 144, 216, 288])
    state = build_state(paper, npc_pos=npc, bot_pos=BOT, tag=jnp.int32(0))
    hold = jnp.full(5, 1, jnp.int32)  # strafing: no damage, so the reward is the shaping alone
    _, r_paper, *_ = env.step_env(jax.random.key(0), state, hold, paper)
    _, r_intent, *_ = env.step_env(jax.random.key(0), state, hold, intent)
    # At 20 u, 14 u from every Surround slot: Table 5 pays, the intent recipe does not.
    assert float(r_paper.sum()) > 0.0 and float(r_intent.sum()) == 0.0


def test_measures_start_with_the_fight_not_the_walk_in():
    # A squad that spawns 20 u away and walks in: its mean distance counts from the first tick within 8 u.
    env, params = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, bot_melee_damage=0.0, episode_s=12.0)
    run = make_runner(env, params, focus_fire_policy, 1, num_episodes=8, accumulators={"intents": INTENTS})
    result = run(None, params, jax.random.key(0))
    acc = result.extras["intents"]
    measures = episode_measures(acc, params.dt)
    assert bool(jnp.all(acc["engaged"]))
    whole = acc["all"]["distance"] / acc["all"]["npc_ticks"]
    assert np.all(np.asarray(measures["distance"]) < 8.0)
    assert np.all(np.asarray(measures["distance"]) < np.asarray(whole))
    # A squad that never comes within 8 u is measured over the whole episode.
    far_env, far = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, episode_s=3.0)
    hold = make_runner(
        far_env, far, lambda p, o, k: jnp.full(o.shape[:-1], 4, jnp.int32), 1, 8, accumulators={"intents": INTENTS}
    )
    acc = hold(None, far, jax.random.key(1)).extras["intents"]
    never = ~np.asarray(acc["engaged"])
    assert never.any()
    got = np.asarray(episode_measures(acc, far.dt)["far_share"])[never]
    np.testing.assert_allclose(got, np.asarray(acc["all"]["far_share"] / acc["all"]["npc_ticks"])[never])

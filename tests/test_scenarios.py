"""Scenario presets (`jaxarena.make(..., scenario=NAME)`), the cleave rule and the intent squads."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import SPREAD, actions, build_state

import jaxarena
from jaxarena import policies
from jaxarena.names import BOT_MAX_HP, MELEE, MOVE_TO_BOT, RANGED, RETREAT, STRAFE_LEFT, STRAFE_RIGHT
from jaxarena.runner import make_runner
from jaxarena.scenarios import SCENARIOS

_STEP = jax.jit(jaxarena.Arena().step_env)


def test_paper_is_the_default_and_equals_plain_params():
    _, default = jaxarena.make("Arena-v0")
    env, paper = jaxarena.make("Arena-v0", scenario="paper")
    chex.assert_trees_all_equal(default, paper)
    assert env.scenario == "paper"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_preset_builds_with_its_overrides_and_keeps_the_squad(name):
    env, params = jaxarena.make("Arena-v0", scenario=name, bot="evasive")
    assert env.scenario == name and env.num_agents == 5
    for field, value in SCENARIOS[name].items():
        assert float(getattr(params, field)) == value
    assert int(params.bot_type) == jaxarena.bot_index("evasive")
    obs, state = env.reset(jax.random.key(0), params)
    chex.assert_shape(obs, (5, env.obs_size))
    assert float(state.bot_hp) == float(params.bot_hp)


def test_headroom_is_the_probes_setting_and_explicit_overrides_win():
    _, params = jaxarena.make("Arena-v0", scenario="headroom")
    assert (float(params.bot_speed), float(params.bot_hp)) == (4.0, 5 * BOT_MAX_HP)
    _, params = jaxarena.make("Arena-v0", scenario="headroom", bot_hp=1200.0, shaping_weight=1.0)
    assert (float(params.bot_speed), float(params.bot_hp), float(params.shaping_weight)) == (4.0, 1200.0, 1.0)
    multi = jaxarena.make_jaxmarl("Arena-v0", bot="balanced", scenario="headroom")
    assert float(multi.params.bot_hp) == 5 * BOT_MAX_HP


def test_unknown_scenario_is_rejected_with_the_list_of_presets():
    with pytest.raises(ValueError, match="unknown scenario 'hard'; presets: paper, headroom"):
        jaxarena.make("Arena-v0", scenario="hard")


def _cleave_state(params):
    # Three NPCs within the bot's 3 u melee range, two far away.
    npc = SPREAD.copy()
    npc[1], npc[2], npc[3] = [14.0, 6.0], [15.0, 7.5], [16.5, 6.0]
    return build_state(params, npc, [15.0, 5.5])


def test_cleave_strikes_every_npc_in_range_and_is_traced():
    _, plain = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0)
    _, cleave = jaxarena.make("Arena-v0", scenario="cleave", bot="aggressive", bot_speed=0.0)
    hold = actions(*[MELEE] * 5)  # every NPC stands still (a melee, in range or not, does not move)
    taken = {}
    for name, params in (("plain", plain), ("cleave", cleave)):
        state = _cleave_state(params)
        _, _, _, _, info = _STEP(jax.random.key(0), state, hold, params)
        taken[name] = np.asarray(info["damage_taken"])
    # Without cleave only the nearest NPC (index 1, 1.12 u away) is struck; with it, all three in range.
    np.testing.assert_array_equal(taken["plain"], [0.0, 15.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(taken["cleave"], [0.0, 15.0, 15.0, 15.0, 0.0])
    # One compiled step served both scenarios: the cleave switch is a traced value.
    assert _STEP._cache_size() == 1


def test_a_dead_npc_in_range_is_not_cleaved():
    _, cleave = jaxarena.make("Arena-v0", scenario="cleave", bot="aggressive", bot_speed=0.0)
    state = _cleave_state(cleave).replace(npc_hp=jnp.array([60.0, 60.0, 0.0, 60.0, 60.0]))
    _, _, _, _, info = _STEP(jax.random.key(0), state, actions(*[MELEE] * 5), cleave)
    np.testing.assert_array_equal(info["damage_taken"], [0.0, 15.0, 0.0, 15.0, 0.0])


def _obs_at(distance: float, bearing_deg: float = -90.0, can_attack: bool = False):
    """A Table 3 observation of five NPCs stacked at `distance` from a bot at the arena's centre."""
    env, params = jaxarena.make("Arena-v0")
    t = np.deg2rad(bearing_deg)
    npc = np.tile([15.0 + distance * np.cos(t), 15.0 + distance * np.sin(t)], (5, 1))
    state = build_state(params, npc, [15.0, 15.0])
    obs = env.observe(state, params)
    return obs.at[:, 7].set(1.0 if can_attack else 0.0)


@pytest.mark.parametrize(
    "distance,fire_prob,expected",
    [(3.0, 1.0, RETREAT), (14.0, 1.0, MOVE_TO_BOT), (8.0, 1.0, RANGED), (8.0, 0.0, RETREAT), (10.0, 0.0, MOVE_TO_BOT)],
)
def test_kite_keeps_6_to_11_units_fires_and_otherwise_steers_for_the_middle(distance, fire_prob, expected):
    acts = policies.kite_policy(None, _obs_at(distance), jax.random.key(0), fire_prob=fire_prob)
    np.testing.assert_array_equal(acts, np.full(5, expected))


def test_kite_fires_at_its_rate_in_the_band():
    batch = jnp.broadcast_to(_obs_at(8.0), (400, 5, 23))
    share = float(jnp.mean(jax.jit(policies.kite_policy)(None, batch, jax.random.key(2)) == RANGED))
    assert 0.75 < share < 0.85  # fire_prob 0.8


def test_surround_spreads_the_squad_round_the_bot_then_melees():
    # All five stand due south of the bot, 4 u off: the middle NPC holds its slot and closes in,
    # the others strafe towards slots 72 and 144 degrees either way.
    acts = np.asarray(jax.jit(policies.surround_policy)(None, _obs_at(4.0), jax.random.key(0)))
    assert acts[2] == MOVE_TO_BOT
    assert set(acts[:2]) == {STRAFE_LEFT} and set(acts[3:]) == {STRAFE_RIGHT}
    far = np.asarray(policies.surround_policy(None, _obs_at(12.0), None))
    np.testing.assert_array_equal(far, np.full(5, MOVE_TO_BOT))  # close in first
    ready = np.asarray(policies.surround_policy(None, _obs_at(2.0, can_attack=True), None))
    assert ready[2] == MELEE


def test_flank_sends_the_squad_to_both_sides():
    acts = np.asarray(policies.flank_policy(None, _obs_at(4.0), None))
    assert set(acts[0::2]) == {STRAFE_RIGHT} and set(acts[1::2]) == {STRAFE_LEFT}


@pytest.mark.analysis  # a scripted squad, not the env: outside the core tier
def test_side_keeper_turns_each_npc_towards_the_nearer_side_of_the_bots_facing():
    # The bot faces east; NPCs at 6 u (inside the 5-7.5 u band) on bearings off that facing.
    env, params = jaxarena.make("ArenaFacing-v0", bot="aggressive", bot_speed=0.0, bot_melee_damage=0.0)
    bot, east = np.array([15.0, 15.0]), jnp.array([1.0, 0.0])
    off = np.array([30.0, 150.0, -30.0, -150.0, 88.0])
    npc = bot + 6.0 * np.stack([np.cos(np.radians(off)), np.sin(np.radians(off))], axis=-1)
    state = build_state(params, npc_pos=npc, bot_pos=bot, bot_facing=east)
    acts = policies.side_keeper_policy(None, env.observe(state, params))
    np.testing.assert_array_equal(acts, [STRAFE_RIGHT, STRAFE_LEFT, STRAFE_LEFT, STRAFE_RIGHT, RANGED])
    # Played in the arena, every strafe brings its NPC's bearing nearer the side it was nearer.
    moved, *_ = env.step_env(jax.random.key(0), state, acts, params)
    v = np.asarray(moved.npc_pos) - bot
    after = np.degrees(np.arctan2(v[:, 1], v[:, 0]))
    side = np.where(off >= 0, 90.0, -90.0)
    assert np.all(np.abs(after[:4] - side[:4]) < np.abs(off[:4] - side[:4])), after
    # Outside the band it closes in or backs off first.
    for distance, expected in ((10.0, MOVE_TO_BOT), (3.0, RETREAT)):
        near = bot + distance * np.stack([np.cos(np.radians(off)), np.sin(np.radians(off))], axis=-1)
        obs = env.observe(build_state(params, npc_pos=near, bot_pos=bot, bot_facing=east), params)
        np.testing.assert_array_equal(policies.side_keeper_policy(None, obs), np.full(5, expected))
    with pytest.raises(ValueError, match="ArenaFacing-v0"):
        policies.side_keeper_policy(None, _obs_at(6.0), None)


def test_hybrid_melees_fires_or_walks():
    key = jax.random.key(1)
    np.testing.assert_array_equal(policies.hybrid_policy(None, _obs_at(2.0, can_attack=True), key), np.full(5, MELEE))
    np.testing.assert_array_equal(policies.hybrid_policy(None, _obs_at(14.0), key), np.full(5, MOVE_TO_BOT))
    batch = jnp.broadcast_to(_obs_at(8.0), (400, 5, 23))
    share = float(jnp.mean(jax.jit(policies.hybrid_policy)(None, batch, key) == RANGED))
    assert 0.2 < share < 0.3  # fire_prob 0.25


def test_tag_switch_policy_plays_the_policy_of_the_observed_tag():
    switch = jax.jit(policies.tag_switch_policy(policies.rush_policy, policies.kite_policy))
    obs = _obs_at(3.0)
    np.testing.assert_array_equal(switch(None, obs, jax.random.key(0)), np.full(5, MOVE_TO_BOT))  # tag 0: rush
    tagged = obs.at[:, 22].set(1.0 / 3.0)
    np.testing.assert_array_equal(switch(None, tagged, jax.random.key(0)), np.full(5, RETREAT))  # tag 1: kite


@pytest.mark.analysis  # a scripted squad, not the env: outside the core tier
def test_true_mode_tags_report_the_bots_mode_to_the_switcher():
    env, params = jaxarena.make("Arena-v0", scenario="headroom")
    switch = policies.tag_switch_policy(policies.rush_policy, policies.kite_policy)
    run = make_runner(env, params, switch, policies.true_mode_tags(), 16, num_periods=4)
    for bot, mode in (("aggressive", 0), ("evasive", 1)):
        result = run(None, params.replace(bot_type=jaxarena.bot_index(bot)), jax.random.key(0))
        active = np.asarray(result.decision_active)
        assert active.any()
        np.testing.assert_array_equal(np.asarray(result.decision_tags)[active], mode)
    balanced = run(None, params, jax.random.key(0))
    assert set(np.unique(np.asarray(balanced.decision_tags))) <= {0, 1}


def test_training_accepts_and_records_the_scenario(tmp_path):
    from jaxarena.algorithms.checkpoint import read_config, write_config
    from jaxarena.algorithms.config import PPOConfig
    from jaxarena.algorithms.ppo import make_trainer
    from jaxarena.algorithms.train_loop import _config_from_args, parse_args

    args = parse_args(["--out", str(tmp_path), "--scenario", "headroom", "--combination", "B"])
    config = _config_from_args(args, None)
    assert config.scenario == "headroom"
    write_config(tmp_path, config)
    assert read_config(tmp_path).scenario == "headroom"
    # A config written before scenarios existed loads as the paper's arena.
    legacy = {k: v for k, v in config.to_dict().items() if k != "scenario"}
    assert PPOConfig.from_dict(legacy).scenario == "paper"
    with pytest.raises(ValueError, match="scenario must be one of"):
        PPOConfig(scenario="hard")
    small = config.replace(num_envs=6, num_steps=4, num_minibatches=2, total_timesteps=24)
    runner = jax.jit(make_trainer(small, mesh=None).init)(jax.random.key(0))
    env_state = runner.log_state.env_state
    np.testing.assert_array_equal(env_state.bot_hp, 5 * BOT_MAX_HP)

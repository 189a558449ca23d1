"""The packaged policies load, play, and B responds to its strategy tag."""

from __future__ import annotations

import numpy as np
import pytest

from jaxarena.algorithms.checkpoint import load_policy, shipped_policies
from jaxarena.algorithms.evaluation import paired_gain, run_episodes, tag_response, wilson_interval
from jaxarena.analysis.intents import MEASURES
from jaxarena.names import AGGRESSIVE, FLANK, RETREAT_TAG, SURROUND


def needs(name):
    return pytest.mark.skipif(name not in shipped_policies(), reason=f"no packaged policy {name}")


@needs("A")
@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_packaged_a_loads_and_beats_the_aggressive_bot():
    policy, params = load_policy("A", greedy=True)
    res = run_episodes(policy, params, "aggressive", n=64, seed=123, env_id=policy.env_id)
    assert np.mean(res["outcome"] == 1) > 0.8


@needs("B")
@needs("B-paper")
def test_the_default_b_is_the_expert_squad_and_the_paper_recipes_b_stays_loadable():
    """ "B" is the per-tag expert squad on ArenaFormation-v2; "B-paper" the Table 5 recipe on Table 3's obs."""
    from jaxarena.protocol.config import ProtocolConfig
    from jaxarena.protocol.policies import policy_shaping

    b, _ = load_policy("B")
    paper, _ = load_policy("B-paper")
    assert (b.env_id, b.recipe, b.shaping_weight) == ("ArenaFormation-v2", "obey", 4.0)
    assert (paper.env_id, paper.recipe, paper.shaping_weight) == ("Arena-v0", "paper", 1.0)
    assert ProtocolConfig().policy_b == "B"
    # The protocol logs each B's return with the shaping it trained on (recipe index 2: obey).
    assert policy_shaping(b) == {"shaping_weight": 4.0, "shaping_recipe": 2}
    assert policy_shaping(paper) == {"shaping_weight": 1.0, "shaping_recipe": 0}
    assert policy_shaping(lambda params, obs, key: obs) == {"shaping_weight": 1.0, "shaping_recipe": 0}


@pytest.fixture(scope="module")
def b_tag_response():
    """The paper recipe's B (B-paper) under each fixed tag, 128 paired episodes per (bot, tag), all three bots.

    The same measurement as docs/training.md's "Flank, measured" table (seed 7).
    """
    policy, params = load_policy("B-paper")
    return tag_response(policy, params, n=128, seed=7, env_id=policy.env_id)


@needs("B-paper")
@pytest.mark.slow
def test_packaged_b_paper_keeps_away_under_retreat_and_closes_in_under_aggressive(b_tag_response):
    dist = b_tag_response["mean_distance"]
    gain, se = paired_gain(dist, RETREAT_TAG, AGGRESSIVE)
    assert gain > 3.0 and gain - 3 * se > 0, (gain, se)
    for other in (SURROUND, FLANK, RETREAT_TAG):
        gain, se = paired_gain(dist, other, AGGRESSIVE)
        assert gain - 3 * se > 0, (other, gain, se)


@needs("B-paper")
@pytest.mark.slow
def test_packaged_b_paper_flank_raises_lateral_share(b_tag_response):
    """Flank pays for bearings of 60-120 degrees; Aggressive for closing in. The lateral share must rise.

    Averaged over the three bots: the rise comes from the evasive bot. Against
    the balanced bot alone it is only 0.00 to +0.03, and against the
    aggressive bot (every NPC in melee) no tag moves the share (see
    docs/training.md).
    """
    gain, se = paired_gain(b_tag_response["lateral_share"], FLANK, AGGRESSIVE)
    assert gain > 0.02 and gain - 3 * se > 0, (gain, se)


def test_wilson_interval():
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    lo, hi = wilson_interval(0, 1000)
    assert lo == 0.0 and 0.0 < hi < 0.005


BOTS = ("aggressive", "evasive", "balanced")


def assert_clearly_best(resp, measure, bot, tag, direction=1.0):
    """`tag` beats every other tag on `measure` against `bot` by more than 3 paired SEs (direction -1: lower wins)."""
    b = BOTS.index(bot)
    for other in range(4):
        if other != tag:
            gain, se = paired_gain(direction * resp[measure][b : b + 1], tag, other)
            assert gain - 3 * se > 0, (measure, bot, tag, other, gain, se)


def assert_cells(resp, cells):
    """Each `(measure, tag): bots` entry: `tag` is clearly best on `measure` against each of `bots`."""
    for (measure, tag), bots in cells.items():
        for bot in bots:
            assert_clearly_best(resp, measure, bot, tag)


@needs("B-obey")
@pytest.mark.slow
def test_packaged_b_obey_wins_as_a_under_aggressive_and_keeps_its_tags_apart():
    """B-obey (docs/training.md, v11): its Aggressive expert is A, frozen; the separated cells hold.

    256 paired episodes per cell (docs: 500). Aggressive wins like A and deals damage fastest
    against every bot; Retreat keeps farther than every other tag at every bot; Surround rings
    the evasive and balanced bots tighter. The four cells the docs report failing are not asserted.
    """
    policy, params = load_policy("B-obey")
    resp = tag_response(policy, params, n=256, seed=3, env_id=policy.env_id, shaping_weight=4.0)
    for b, bot in enumerate(BOTS):
        assert resp["npc_win"][b, AGGRESSIVE].mean() >= 0.95, bot
        assert_clearly_best(resp, "far_share", bot, RETREAT_TAG)
        assert_clearly_best(resp, "damage_rate", bot, AGGRESSIVE)
    for bot in ("evasive", "balanced"):
        assert_clearly_best(resp, "coverage", bot, SURROUND)


@needs("A-raid")
@pytest.mark.slow
def test_packaged_a_raid_wins_within_the_calibration_band_against_every_bot():
    """A-raid, trained on the `raid` preset, wins 20-80% against each bot (docs/arena.md's 500 episodes)."""
    policy, params = load_policy("A-raid")
    for bot in BOTS:
        res = run_episodes(policy, params, bot, n=500, seed=0, env_id=policy.env_id, scenario="raid")
        assert 0.2 <= np.mean(res["outcome"] == 1) <= 0.8, bot


@needs("A-raid")
@needs("B-obey-raid")
@pytest.mark.slow
def test_packaged_b_obey_raid_plays_a_raid_under_aggressive_and_keeps_its_tags_apart():
    """B-obey-raid's frozen Aggressive expert is A-raid: the same episodes, won or lost alike.

    And 7 of the 8 separated cells of docs/training.md hold (256 paired episodes, 3 SE): Surround's
    coverage at every bot, Aggressive's damage rate against the evasive and balanced bots, Retreat's
    far share against them too. The eighth, Aggressive's damage rate against the aggressive bot, is
    too close to Retreat's to assert (docs: 84.1 vs 78.0 HP/s over 500 episodes; here +3.7, SE 2.4).
    """
    policy, params = load_policy("B-obey-raid")
    resp = tag_response(policy, params, BOTS, n=256, seed=5, env_id=policy.env_id, scenario="raid")
    a_policy, a_params = load_policy("A-raid")
    for b, bot in enumerate(BOTS):
        a = run_episodes(a_policy, a_params, bot, n=256, seed=5, env_id=a_policy.env_id, scenario="raid")
        np.testing.assert_array_equal(resp["npc_win"][b, AGGRESSIVE], a["outcome"] == 1)
    both = ("evasive", "balanced")
    assert_cells(
        resp, {("coverage", SURROUND): BOTS, ("damage_rate", AGGRESSIVE): both, ("far_share", RETREAT_TAG): both}
    )


@needs("B")
@pytest.mark.slow
def test_packaged_b_keeps_every_tag_apart_on_paper():
    """The default B (docs/training.md, "Stop 8"): B-obey with its Flank expert retrained on ArenaFormation-v2.

    All 12 (bot x measure) cells, each by more than 3 paired SEs over 256 episodes (docs: 500, seed 0),
    and its Aggressive, B-obey's frozen A, wins like A.
    """
    policy, params = load_policy("B")
    assert policy.env_id == "ArenaFormation-v2"
    resp = tag_response(policy, params, n=256, seed=3, env_id=policy.env_id)
    for b, bot in enumerate(BOTS):
        assert resp["npc_win"][b, AGGRESSIVE].mean() >= 0.95, bot
        for tag, measure in enumerate(MEASURES):
            assert_clearly_best(resp, measure, bot, tag)


@needs("B-sides-raid")
@pytest.mark.slow
def test_packaged_b_sides_raid_keeps_ten_cells_apart_on_raid():
    """B-sides-raid: B-obey-raid with its Flank expert retrained on ArenaFormation-v2 (36M steps).

    Surround's coverage and Flank's share within 8 u at every bot; Aggressive's damage rate and
    Retreat's far share against the evasive and balanced bots (256 paired episodes, 3 SEs; Flank
    against the balanced bot is the narrow one, +0.027 with SE 0.008). Not asserted
    (docs/training.md, "Stop 8"): against the aggressive bot Retreat's squad is caught (the bot is
    faster than the NPCs) and its far share is below Surround's, and Aggressive's damage rate is
    too close to Retreat's to assert ("Stop 7").
    """
    policy, params = load_policy("B-sides-raid")
    assert (policy.env_id, policy.scenario) == ("ArenaFormation-v2", "raid")
    resp = tag_response(policy, params, n=256, seed=5, env_id=policy.env_id, scenario="raid")
    both = ("evasive", "balanced")
    assert_cells(
        resp,
        {
            ("coverage", SURROUND): BOTS,
            ("flank_share", FLANK): BOTS,
            ("damage_rate", AGGRESSIVE): both,
            ("far_share", RETREAT_TAG): both,
        },
    )


@needs("A-raid")
@needs("B-raid")
@pytest.mark.slow
def test_packaged_b_raid_keeps_every_tag_apart_on_raid_and_plays_a_raid_under_aggressive():
    """B-raid (docs/training.md, "Stop 9"): B-sides-raid with a fresh Retreat expert, 8M steps.

    All 12 cells by 3 paired SEs over 256 episodes (docs: 500, seed 0); Retreat's far share against
    the aggressive bot, the cell B-sides-raid missed, included. Its Aggressive expert is A-raid's.
    """
    policy, params = load_policy("B-raid")
    assert (policy.env_id, policy.scenario) == ("ArenaFormation-v2", "raid")
    resp = tag_response(policy, params, n=256, seed=5, env_id=policy.env_id, scenario="raid")
    a_policy, a_params = load_policy("A-raid")
    for b, bot in enumerate(BOTS):
        a = run_episodes(a_policy, a_params, bot, n=256, seed=5, env_id=a_policy.env_id, scenario="raid")
        np.testing.assert_array_equal(resp["npc_win"][b, AGGRESSIVE], a["outcome"] == 1)
        for tag, measure in enumerate(MEASURES):
            assert_clearly_best(resp, measure, bot, tag)

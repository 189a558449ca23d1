"""Racing with the real scorer (`jaxarena.coder.racing.race_policies`): who is dropped, and on which episodes.

Tiny sizes: two bots whose episodes are short against a rush squad, 20 then 60 episodes per bot.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from jaxarena.coder.loop_config import LoopConfig
from jaxarena.coder.racing import RaceConfig, race_policies
from jaxarena.coder.score_types import Score, ScoreConfig
from jaxarena.coder.scoring import score_policies, score_sources
from jaxarena.coder.translate import translate

RUSH = "def policy(obs):\n    if obs.bot.can_attack:\n        return MELEE\n    return MOVE_TO_BOT\n"
# Never strikes: it cannot win.
RETREAT = "def policy(obs):\n    return RETREAT\n"
CONFIG = ScoreConfig(episodes_per_bot=60, bots=("aggressive", "balanced"), lanes=64, seed=1, chunk_s=2.0)
RACE = RaceConfig(first=20, growth=3.0, alpha=0.05)


def test_a_clearly_worse_candidate_stops_at_the_first_look_and_a_better_one_gets_the_full_budget():
    assert RACE.looks(CONFIG.episodes_per_bot) == (20, 60)
    worse, better = race_policies([translate(RETREAT), translate(RUSH)], CONFIG, RACE)
    assert worse.status == better.status == "ok"
    assert worse.episodes_per_bot == 20 and better.episodes_per_bot == 60
    assert worse.reward < 0.1 < 0.9 < better.reward
    # An earlier best, not played again, sets the bar from the first look: the lone worse candidate stops there.
    (alone,) = race_policies([translate(RETREAT)], CONFIG, RACE, incumbent=better)
    assert alone.episodes_per_bot == 20


@pytest.mark.slow  # three compiled programs: over 20 s on 2 loaded cores
def test_raced_scores_are_full_scorings_on_the_episodes_they_played():
    """Same keys: a candidate stopped at n has exactly the score full scoring gives on its first n episodes."""
    sources = [RETREAT, RUSH]
    raced = score_sources(sources, CONFIG, race=RACE)
    assert [s.episodes_per_bot for s in raced] == [20, 60]
    # Same lanes (64 < every job count here) and the same two programs in one batch: the same compiled play.
    first_20 = score_policies([translate(s) for s in sources], dataclasses.replace(CONFIG, episodes_per_bot=20))
    full = score_policies([translate(s) for s in sources], CONFIG)
    assert raced[0] == first_20[0]  # win rates, losses, timeouts, damage, lengths, action shares: all equal
    assert raced[1] == full[1]


@pytest.mark.slow  # two races: over ~10 s on 2 loaded cores
def test_playing_ahead_changes_no_score(monkeypatch):
    """Idle lanes play the next look's episodes early; each episode has its own keys, so nothing changes."""
    from jaxarena.coder.batch_rollout import LanePool

    played_ahead = []
    play = LanePool.play

    def counting(pool, ids, required=None):
        play(pool, ids, required)
        played_ahead.append(int(pool.done[ids[required:]].sum()))  # jobs beyond those asked for, ended

    monkeypatch.setattr(LanePool, "play", counting)
    policies = [translate(RETREAT), translate(RUSH), translate(RUSH.replace("MELEE", "RANGED"))]
    ahead = race_policies(policies, CONFIG, RACE)
    assert played_ahead[0] > 0  # the first look's lanes did play into the second look
    monkeypatch.setattr(LanePool, "play", play)
    in_step = race_policies(policies, CONFIG, dataclasses.replace(RACE, speculate=False))
    assert ahead == in_step
    # Two are dropped at the first look, so the episodes played ahead for them are thrown away.
    assert sorted(s.episodes_per_bot for s in ahead) == [20, 20, 60]


def test_a_race_with_nothing_to_play_returns_the_errors():
    """No program runs (no code, refused by the sandbox), even with an earlier best setting the bar."""
    bar = Score(reward=0.5, status="ok", win_rate={"aggressive": 0.5, "balanced": 0.5}, episodes_per_bot=10)
    assert race_policies([], CONFIG, RACE, incumbent=bar) == []
    refused = "def policy(obs):\n    while True:\n        pass\n"
    scores = score_sources([None, refused], CONFIG, race=RACE, incumbent=bar)
    assert [s.status for s in scores] == ["no_code", "error"]


def test_the_loop_races_only_when_asked_and_old_runs_resume():
    assert LoopConfig().race_config() is None
    assert "race" not in LoopConfig().to_json()  # a run recorded before racing existed has the same config
    raced = LoopConfig(race=True, race_alpha=0.1, race_first=50)
    assert raced.race_config() == RaceConfig(first=50, alpha=0.1)
    assert LoopConfig.from_json(raced.to_json()) == raced


def test_the_cli_takes_the_race_options():
    from jaxarena.coder.cli import build_parser
    from jaxarena.coder.loop_config import LoopError

    args = build_parser().parse_args(["--race", "--race-alpha", "0.1", "--race-first", "50"])
    assert (args.race, args.race_alpha, args.race_first) == (True, 0.1, 50)
    assert build_parser().parse_args([]).race is False
    with pytest.raises(LoopError, match="alpha"):
        LoopConfig(race=True, race_alpha=2.0)


def test_race_options_without_race_are_refused_in_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "jaxarena.coder.cli", "--llm", "embedded", "--race-first", "10"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].endswith("--race-first is only for --race"), done.stderr


def _fails_after_its_first_trace():
    """A program that passes the batch check, then raises when the rollout traces it: it must sink only itself."""
    traces = []

    def policy(params, obs, key):
        traces.append(1)
        if len(traces) > 1:
            raise RuntimeError("boom in the rollout")
        return translate(RUSH)(params, obs, key)

    return policy


@pytest.mark.parametrize("score", ["full", "race"])
def test_a_program_that_fails_in_the_rollout_sinks_only_itself(score):
    config = dataclasses.replace(CONFIG, episodes_per_bot=20, batch=2)
    policies = [_fails_after_its_first_trace(), translate(RUSH)]
    if score == "full":
        bad, good = score_policies(policies, config)
    else:
        bad, good = race_policies(policies, config, dataclasses.replace(RACE, first=20))
    assert bad.status == "error" and bad.error_kind == "runtime" and bad.reward == -0.5
    assert bad.error == "runtime: the program failed in the rollout: RuntimeError: boom in the rollout"
    assert good.status == "ok" and good.reward > 0.9

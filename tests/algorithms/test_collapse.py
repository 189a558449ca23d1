"""The collapse checks: a run that stops winning, or settles on a losing near-deterministic policy, is named."""

from __future__ import annotations

import pytest

from jaxarena.algorithms.collapse import ENTROPY_COLLAPSE, NO_WINS, CollapseWatch
from jaxarena.names import BOT_TYPES
from jaxarena.scenarios import SCENARIOS, TrainingStandard, training_standard

STANDARD = TrainingStandard(bars=None, after_steps=1000, window_steps=400, entropy_floor=0.5, stuck_win_rate=0.05)


def rows(start: int, n: int, *, wins: int, episodes: int = 10, entropy: float = 1.0, step: int = 100) -> list[dict]:
    """`n` metric rows from env step `start`: each with `wins` of `episodes` won against the evasive bot."""
    out = []
    for i in range(n):
        row = {"env_steps": start + (i + 1) * step, "entropy": entropy}
        for b in BOT_TYPES:
            row[f"episodes_per_bot_{b}"] = episodes if b == "evasive" else 0
            row[f"npc_wins_per_bot_{b}"] = wins if b == "evasive" else 0
        out.append(row)
    return out


def test_a_run_that_never_wins_is_flagged_once_past_the_grace_steps():
    watch = CollapseWatch(STANDARD, ["evasive"])
    assert watch.update(rows(0, 9, wins=0)) is None  # 900 steps: still in the grace period
    message = watch.update(rows(900, 2, wins=0))
    assert message is not None and "collapsing" in message and "no training episode won" in message
    assert watch.flag == NO_WINS
    assert watch.update(rows(1100, 3, wins=0)) is None  # said once, not every chunk
    # the verdict is taken at every row: it started at the first row past the grace period
    assert watch.status() == {"collapsing": True, "flag": NO_WINS, "events": [{"env_steps": 1000, "flag": NO_WINS}]}


def test_the_verdicts_do_not_depend_on_how_the_rows_were_chunked():
    record = rows(0, 12, wins=0) + rows(1200, 3, wins=2) + rows(1500, 10, wins=1, episodes=100, entropy=0.2)
    whole = CollapseWatch(STANDARD, ["evasive"])
    whole.update(record)
    chunked = CollapseWatch(STANDARD, ["evasive"])
    for i in range(0, len(record), 4):
        chunked.update(record[i : i + 4])
    assert whole.status() == chunked.status()
    assert [e["flag"] for e in whole.status()["events"]] == [NO_WINS, None, ENTROPY_COLLAPSE]


def test_a_winning_run_is_never_flagged():
    watch = CollapseWatch(STANDARD, ["evasive"])
    assert watch.update(rows(0, 30, wins=4, entropy=0.2)) is None  # low entropy is fine while it wins
    assert watch.status()["collapsing"] is False


def test_a_near_deterministic_run_that_seldom_wins_is_an_entropy_collapse():
    watch = CollapseWatch(STANDARD, ["evasive"])
    watch.update(rows(0, 15, wins=1, episodes=100, entropy=0.3))  # 1% of its episodes, at 0.3 nats
    assert watch.flag == ENTROPY_COLLAPSE
    # the same win share with the entropy still high: exploring, not collapsed
    other = CollapseWatch(STANDARD, ["evasive"])
    other.update(rows(0, 15, wins=1, episodes=100, entropy=1.2))
    assert other.flag is None


def test_a_run_that_wins_again_is_said_to_recover():
    watch = CollapseWatch(STANDARD, ["evasive"])
    watch.update(rows(0, 12, wins=0))
    assert watch.flag == NO_WINS
    message = watch.update(rows(1200, 2, wins=3))
    assert message is not None and message.startswith("recovered")
    assert watch.status()["collapsing"] is False
    assert [e["flag"] for e in watch.status()["events"]] == [NO_WINS, None]


def test_only_the_bots_the_run_trains_against_count():
    watch = CollapseWatch(STANDARD, ["aggressive"])  # the rows' wins are all against the evasive bot
    watch.update(rows(0, 12, wins=5))
    assert watch.flag is None  # no aggressive episodes at all: nothing to judge, nothing flagged


def test_the_paper_arena_keeps_its_bars_and_another_arena_declares_its_own():
    assert dict(training_standard("paper").bars) == {"aggressive": 0.95, "evasive": 0.90, "balanced": 0.95}
    assert dict(training_standard("raid").bars) != dict(training_standard("paper").bars)
    assert training_standard("headroom").bars is None  # declares none: nothing is judged
    assert set(SCENARIOS) >= {"paper", "raid", "headroom"}
    with pytest.raises(ValueError, match="unknown scenario"):
        training_standard("nope")


def test_the_training_summary_names_a_collapsing_seed_and_why(tmp_path):
    import argparse
    import json

    from jaxarena.algorithms.config import PPOConfig
    from jaxarena.algorithms.multi_run import plan_runs
    from jaxarena.algorithms.train_many import summarise

    runs = plan_runs(PPOConfig.preset("default"), [1, 2])
    standard = training_standard("paper")
    steps = standard.after_steps + standard.window_steps
    for run, wins in zip(runs, (0, 3), strict=True):
        (tmp_path / run.name).mkdir()
        record = rows(0, 20, wins=wins, step=steps // 20)
        (tmp_path / run.name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in record))
    summarise(argparse.Namespace(eval_episodes=0), runs, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [r["collapse"]["collapsing"] for r in summary["runs"]] == [True, False]
    assert summary["runs"][0]["collapse"]["flag"] == NO_WINS
    assert summary["settings"]["(base)"]["collapsing"] == [1]
    text = (tmp_path / "summary.md").read_text()
    assert "seed_1: learned" not in text and "seed_1" in text and "no_wins" in text and "seed_2" not in text

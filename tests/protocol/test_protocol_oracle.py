"""Combinations F and O and the pricing of B's decisions, end to end on a small budget.

Real pieces throughout: the shipped A and B policies (or a scripted squad), the embedded
LLM, the oracle's playouts. Episodes are cut to a few decision periods and the oracle
plays K = 2 playouts per tag, to keep the run short.
"""

from __future__ import annotations

import csv
import dataclasses
import json

import chex
import numpy as np
import pytest

from jaxarena.names import NPC_WIN, NUM_TAGS
from jaxarena.protocol import ProtocolConfig, evaluate, stats
from jaxarena.protocol.cli import build_parser, config_from_args, default_run_id
from jaxarena.protocol.combinations.b import BOptions, llm_run, prompt_limits
from jaxarena.protocol.runner import ProtocolRunner

K = 2
CONFIG = ProtocolConfig(
    episodes=3,
    seed=1,
    combinations=("A", "B", "F", "O"),
    num_periods=2,
    oracle_rollouts=K,
    n_boot=500,
    options={"B": BOptions(price_decisions=True)},
    llm_path="host",
)


class SimulatedKill(Exception):
    pass


def _kill_after(target):
    def hook(name, cell):
        if name == target:
            raise SimulatedKill(name)

    return hook


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """r1: killed after F_aggressive, then resumed; r2: the same config uninterrupted (warm LLM cache)."""
    out = tmp_path_factory.mktemp("results")
    with pytest.raises(SimulatedKill):
        evaluate(CONFIG, out, "r1", progress=False, figures=False, after_cell=_kill_after("F_aggressive"))
    stored = sorted(p.name for p in (out / "r1" / "cells").iterdir())
    s1 = evaluate(CONFIG, out, "r1", progress=False, figures=False)
    s2 = evaluate(CONFIG, out, "r2", progress=False, figures=False)
    return {"out": out, "stored_after_kill": stored, "s1": s1, "s2": s2}


def _decisions(run_dir):
    return [json.loads(line) for line in (run_dir / "decisions.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_resume_after_a_kill_gives_the_uninterrupted_results(runs):
    out = runs["out"]
    assert "F_aggressive.json" in runs["stored_after_kill"] and "O_aggressive.json" not in runs["stored_after_kill"]
    assert "F_aggressive" in runs["s1"]["timings"]["loaded_cells"]
    assert (out / "r1" / "episodes.csv").read_bytes() == (out / "r2" / "episodes.csv").read_bytes()
    # Host timings and cache hits differ between the runs; everything the oracle says must not.
    volatile = ("latency_s", "cache_hit")
    d1 = [{k: v for k, v in d.items() if k not in volatile} for d in _decisions(out / "r1")]
    d2 = [{k: v for k, v in d.items() if k not in volatile} for d in _decisions(out / "r2")]
    assert d1 == d2 and len(d1) > 0
    assert runs["s1"]["oracle"] == runs["s2"]["oracle"]


@pytest.mark.slow
def test_outputs_have_the_right_shapes(runs):
    run_dir = runs["out"] / "r1"
    rows = list(csv.DictReader((run_dir / "episodes.csv").open()))
    labels = ["A", "B", *(f"F{t}" for t in range(NUM_TAGS)), "O"]
    for label in labels:
        for bot in CONFIG.bots:
            mine = [r for r in rows if r["combination"] == label and r["bot"] == bot]
            assert len(mine) == CONFIG.episodes
    # Paired design: every combination of a bot plays the same episode keys.
    for bot in CONFIG.bots:
        keys = [[r["episode_key"] for r in rows if r["combination"] == label and r["bot"] == bot] for label in labels]
        assert all(k == keys[0] for k in keys)
    # A fixed-tag episode set holds its tag all episode.
    for r in rows:
        if r["combination"].startswith("F"):
            held = int(r["combination"][1])
            assert all(int(r[f"steps_tag{t}"]) == 0 for t in range(NUM_TAGS) if t != held)
            assert int(r[f"steps_tag{held}"]) > 0
    s = runs["s1"]
    assert set(s["oracle"]["by_bot"]) == set(CONFIG.bots)
    assert s["oracle"]["rollouts"] == K and s["oracle"]["scenario"] == "paper"
    for row in s["oracle"]["by_bot"].values():
        assert {"A", "B", "O", "best_fixed", "headroom", "llm"} <= set(row)
        chex.assert_shape(np.asarray(row["fixed_win_pct"]), (NUM_TAGS,))
    assert "Headroom." in (run_dir / "report.md").read_text()


@pytest.mark.slow
def test_every_b_decision_is_priced_consistently(runs):
    records = _decisions(runs["out"] / "r1")
    assert records and {r["combination"] for r in records} == {"B"}
    for r in records:
        win = np.asarray(r["oracle_win"])
        chex.assert_shape(win, (NUM_TAGS,))
        # K playouts per tag: each win probability is a multiple of 1/K in [0, 1].
        np.testing.assert_allclose(win * K, np.round(win * K), atol=1e-5)
        assert np.all((win >= 0) & (win <= 1))
        assert win[r["oracle_best"]] == win.max()
        assert r["regret"] == pytest.approx(win.max() - win[r["tag"]], abs=1e-6) and r["regret"] >= 0
        assert isinstance(r["agrees"], bool)
        if r["agrees"]:
            assert r["regret"] == 0
    s = runs["s1"]["oracle"]["by_bot"]
    for bot in CONFIG.bots:
        mine = [r for r in records if r["bot"] == bot]
        llm = s[bot]["llm"]
        assert llm["decisions"] == len(mine)
        assert llm["mean_regret"] == pytest.approx(np.mean([r["regret"] for r in mine]))
        assert llm["mean_regret"] >= 0 and 0 <= llm["agreement_pct"] <= 100
        assert llm["agreement_pct"] == pytest.approx(100 * np.mean([r["agrees"] for r in mine]))
        lo, hi = llm["regret_ci95"]
        assert 0 <= lo <= llm["mean_regret"] <= hi


@pytest.mark.slow
def test_best_fixed_tag_and_headroom_follow_the_episodes(runs):
    run_dir = runs["out"] / "r1"
    rows = list(csv.DictReader((run_dir / "episodes.csv").open()))
    s = runs["s1"]["oracle"]["by_bot"]

    def won(label, bot):
        return np.array([int(r["outcome"]) == NPC_WIN for r in rows if r["combination"] == label and r["bot"] == bot])

    for bot in CONFIG.bots:
        rates = [100 * won(f"F{t}", bot).mean() for t in range(NUM_TAGS)]
        assert s[bot]["fixed_win_pct"] == pytest.approx(rates)
        best = s[bot]["best_fixed"]
        assert best["tag"] == int(np.argmax(rates)) and best["win_pct"] == pytest.approx(max(rates))
        assert s[bot]["O"]["win_pct"] == pytest.approx(100 * won("O", bot).mean())
        head = s[bot]["headroom"]
        assert head["pct_points"] == pytest.approx(s[bot]["O"]["win_pct"] - best["win_pct"])
        assert head["ci95"][0] <= head["pct_points"] <= head["ci95"][1]


@pytest.mark.slow
def test_stored_oracle_cells_are_refused_under_another_k(runs):
    other = dataclasses.replace(CONFIG, combinations=("A", "O"), oracle_rollouts=3, options={})
    runner = ProtocolRunner(other, runs["out"] / "r1", progress=False)
    assert runner.load_cell("A", "balanced") is not None  # K does not concern A
    with pytest.raises(RuntimeError, match="different configuration"):
        runner.load_cell("O", "balanced")


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_oracle_equals_every_fixed_tag_for_a_policy_that_ignores_its_tag(tmp_path):
    """Hand-checkable: a scripted squad never reads its tag, so whatever O picks, each of its
    episodes is the paired F episode exactly, and the headroom is 0 with a CI of [0, 0]."""
    config = ProtocolConfig(
        episodes=4,
        seed=2,
        bots=("balanced",),
        combinations=("F", "O"),
        policy_b="scripted:focus_fire",
        num_periods=3,
        oracle_rollouts=K,
        n_boot=200,
    )
    s = evaluate(config, tmp_path, "ignore", progress=False, figures=False, cache_path=None)
    cells = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "ignore" / "cells").iterdir()}
    o = cells["O_balanced"]["episodes"]
    for f in cells["F_balanced"]["episodes_by_tag"]:
        assert f["outcome"] == o["outcome"] and f["duration_s"] == o["duration_s"]
        assert f["damage_dealt"] == o["damage_dealt"]
    row = s["oracle"]["by_bot"]["balanced"]
    assert row["headroom"] == {"pct_points": 0.0, "ci95": [0.0, 0.0]}
    assert "llm" not in row and "B" not in row


def test_a_scenario_with_its_own_clock_is_reported_with_it(tmp_path):
    """`raid` ends at 48 s: the episodes stop there, and the summary and report say so (not 120 s)."""
    config = ProtocolConfig(
        episodes=2, seed=3, bots=("evasive",), combinations=("F",), policy_b="scripted:focus_fire", scenario="raid"
    )
    assert config.episode_s == 48.0 and ProtocolConfig().episode_s == 120.0
    assert dataclasses.replace(config, num_periods=2).episode_s == 10.0
    s = evaluate(config, tmp_path, "raid", progress=False, figures=False, cache_path=None)
    cell = json.loads((tmp_path / "raid" / "cells" / "F_evasive.json").read_text())
    durations = [d for f in cell["episodes_by_tag"] for d in f["duration_s"]]
    assert max(durations) == pytest.approx(48.0) and s["protocol"]["episode_s"] == 48.0
    assert "timeouts count as 48 s" in (tmp_path / "raid" / "report.md").read_text()


def test_default_run_id_and_fingerprints_of_a_and_b_are_unchanged(tmp_path):
    # Taken from the code before Combinations F and O existed: the oracle's options change nothing here.
    config = ProtocolConfig()
    assert default_run_id(config) == "embedded-n100-seed0-b687561c"
    runner = ProtocolRunner(config, tmp_path, progress=False)
    # format 3: B's logged return is its policy's own shaping (the stored-cell refusal names it).
    base = {"format": 3, "episodes": 100, "seed": 0, "greedy": False, "num_periods": None}
    assert runner.fingerprint("A") == {**base, "policy": runner.policy("A")[2], "tag": 0}
    llm = {k: v for k, v in llm_run(runner.context).identity().items() if k != "host"}
    b = {**base, "policy": runner.policy("B")[2], "llm": llm, "latency_steps": 0}
    # No prompt cache here, so `auto` runs B's LLM in the graph, which its cells record.
    assert runner.fingerprint("B") == {**b, "llm_path": "graph"}
    host = ProtocolRunner(dataclasses.replace(config, llm_path="host"), tmp_path, progress=False)
    assert host.fingerprint("B") == b
    assert set(llm) == {"backend", "model", "options", "decode"}
    # What does change results enters the fingerprints.
    other = ProtocolRunner(
        ProtocolConfig(scenario="cleave", oracle_rollouts=4, options={"B": BOptions(price_decisions=True)}),
        tmp_path,
        progress=False,
    )
    assert other.fingerprint("A")["scenario"] == "cleave"
    assert other.fingerprint("B")["pricing"] == {"rollouts": 4}
    assert other.fingerprint("O")["oracle"] == {"rollouts": 4}
    assert default_run_id(other.config) != default_run_id(config)


def test_cli_parses_combinations_and_the_oracle_options():
    parser = build_parser()
    config = config_from_args(
        parser.parse_args(["--combinations", "A", "b", "F,O", "--oracle-rollouts", "4", "--price-decisions"])
    )
    assert config.combinations == ("A", "B", "F", "O") and config.oracle_rollouts == 4
    assert config.options_of("B").price_decisions
    default = config_from_args(parser.parse_args([]))
    assert default.combinations == ("A", "B") and default.scenario == "paper"
    assert not default.options_of("B").price_decisions
    assert config_from_args(parser.parse_args(["--scenario", "headroom"])).scenario == "headroom"
    with pytest.raises(ValueError, match="choose from"):
        config_from_args(parser.parse_args(["--combinations", "A", "X"]))
    with pytest.raises(ValueError, match="add B"):
        config_from_args(parser.parse_args(["--combinations", "A", "O", "--price-decisions"]))
    with pytest.raises(ValueError, match="oracle_rollouts"):
        ProtocolConfig(oracle_rollouts=0)
    with pytest.raises(ValueError, match="presets"):
        ProtocolConfig(scenario="moon")


def test_cli_reports_bad_combinations_as_usage_errors(capsys):
    from jaxarena.protocol.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--combinations", "A", "Z"])
    assert exc.value.code == 2 and "choose from" in capsys.readouterr().err


def test_paired_bootstrap_diff_matches_index_resampling():
    rng = np.random.default_rng(0)
    a = rng.random(200) < 0.6
    b = rng.random(200) < 0.4
    diff, lo, hi = stats.paired_bootstrap_diff(a, b, n_boot=4000, seed=1)
    assert diff == pytest.approx(a.mean() - b.mean())
    d = a.astype(float) - b
    ref = [d[rng.integers(0, d.size, d.size)].mean() for _ in range(4000)]
    assert (lo, hi) == pytest.approx(tuple(np.quantile(ref, [0.025, 0.975])), abs=0.02)
    assert stats.paired_bootstrap_diff(a, a, n_boot=100) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        stats.paired_bootstrap_diff(a, b[:-1])


def test_cluster_bootstrap_resamples_whole_episodes():
    rng = np.random.default_rng(0)
    # 50 episodes of 1-9 decisions each, whose values are shared within an episode: the
    # cluster CI must be as wide as the episodes' spread, not the decisions'.
    sizes = rng.integers(1, 10, 50)
    per_episode = rng.random(50)
    clusters = np.repeat(np.arange(50), sizes)
    values = per_episode[clusters]
    mean, lo, hi = stats.cluster_bootstrap_mean(values, clusters, n_boot=4000, seed=2)
    assert mean == pytest.approx(values.mean())
    ref = []
    for _ in range(4000):
        pick = rng.integers(0, 50, 50)
        ref.append(np.sum(per_episode[pick] * sizes[pick]) / np.sum(sizes[pick]))
    assert (lo, hi) == pytest.approx(tuple(np.quantile(ref, [0.025, 0.975])), abs=0.02)
    assert stats.cluster_bootstrap_mean([0.25] * 6, [0, 0, 1, 2, 2, 2], n_boot=50) == (0.25, 0.25, 0.25)


def test_the_prompt_prints_the_scenarios_hp_maxima(tmp_path):
    paper = prompt_limits(ProtocolConfig())
    headroom = prompt_limits(ProtocolConfig(scenario="headroom"))
    assert paper == {"bot_max_hp": 300.0, "npc_max_hp": 60.0}
    assert headroom == {"bot_max_hp": 1500.0, "npc_max_hp": 60.0}

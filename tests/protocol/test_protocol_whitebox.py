"""Combination W: the white-box baselines (docs/coder.md) in the protocol, beside A.

Real pieces throughout: the shipped A policy, the baselines translated from their sources,
the one episode runner. Episodes are cut to three decision periods (15 s), long enough for
the melee squads to win some.
"""

from __future__ import annotations

import csv
import hashlib
import json

import chex
import jax
import numpy as np
import pytest

import jaxarena
from jaxarena.coder.compile import compile_program
from jaxarena.coder.language import BASELINES
from jaxarena.names import NPC_WIN
from jaxarena.protocol import ProtocolConfig, evaluate, stats
from jaxarena.protocol.cli import build_parser, config_from_args
from jaxarena.protocol.combinations.w import print_whitebox
from jaxarena.protocol.config import cell_key_data
from jaxarena.protocol.policies import resolve_policy
from jaxarena.protocol.runner import ProtocolRunner
from jaxarena.runner import make_runner

CONFIG = ProtocolConfig(
    episodes=6, seed=3, bots=("aggressive", "balanced"), combinations=("A", "W"), num_periods=3, n_boot=300
)
SQUADS = sorted(BASELINES)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    summary = evaluate(CONFIG, out, "w", progress=False, figures=False, cache_path=None)
    run_dir = out / "w"
    rows = list(csv.DictReader((run_dir / "episodes.csv").open()))
    return {"out": out, "dir": run_dir, "summary": summary, "rows": rows}


def _column(rows, label, bot, name, cast=float):
    return np.array([cast(r[name]) for r in rows if r["combination"] == label and r["bot"] == bot])


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_each_squad_plays_as_the_compiled_baseline_does_through_the_runner(run):
    """The protocol's W episodes are the episodes the runner gives the compiled program on the
    cell's key (the protocol translates in-process; `compile_program` goes through the sandbox)."""
    for name in SQUADS:
        policy = compile_program(BASELINES[name]).policy
        env, params = jaxarena.make("Arena-v0")
        direct = make_runner(env, params, policy, 0, CONFIG.episodes, num_periods=CONFIG.num_periods)
        for bot in CONFIG.bots:
            env_params = jaxarena.make("Arena-v0", bot=bot)[1]
            result = direct(None, env_params, jax.numpy.asarray(cell_key_data(CONFIG.seed, bot)))
            chex.assert_shape(result.outcome, (CONFIG.episodes,))
            label = f"W:{name}"
            np.testing.assert_array_equal(_column(run["rows"], label, bot, "outcome", int), np.asarray(result.outcome))
            np.testing.assert_allclose(
                _column(run["rows"], label, bot, "duration_s"), np.asarray(result.duration_s), atol=1e-4
            )
            np.testing.assert_allclose(
                _column(run["rows"], label, bot, "damage_dealt"), np.asarray(result.damage_dealt), atol=1e-3
            )
            np.testing.assert_allclose(
                _column(run["rows"], label, bot, "damage_taken"), np.asarray(result.damage_taken), atol=1e-3
            )
    # Not vacuous: within 15 s the melee squads beat the aggressive bot.
    assert _column(run["rows"], "W:rush", "aggressive", "outcome", int).tolist().count(NPC_WIN) > 0


def test_squads_play_a_s_paired_episodes(run):
    rows = run["rows"]
    for bot in CONFIG.bots:
        a_keys = [r["episode_key"] for r in rows if r["combination"] == "A" and r["bot"] == bot]
        assert len(a_keys) == CONFIG.episodes
        for name in SQUADS:
            keys = [r["episode_key"] for r in rows if r["combination"] == f"W:{name}" and r["bot"] == bot]
            assert keys == a_keys
            # A's fixed tag 0, all episode long.
            assert all(int(r["steps_tag0"]) > 0 for r in rows if r["combination"] == f"W:{name}")
    assert {r["combination"] for r in rows} == {"A", *(f"W:{name}" for name in SQUADS)}


def test_summary_follows_the_episodes(run):
    w = run["summary"]["whitebox"]
    rows = run["rows"]
    assert set(w["by_bot"]) == set(CONFIG.bots) and list(w["squads"]) == SQUADS
    for name in SQUADS:
        assert w["squads"][name]["lines"] == len(BASELINES[name].splitlines()) < 40
    for bot in CONFIG.bots:
        row = w["by_bot"][bot]
        a_won = _column(rows, "A", bot, "outcome", int) == NPC_WIN
        assert row["A"]["win_pct"] == pytest.approx(100 * a_won.mean())
        assert list(row["squads"]) == SQUADS
        for name, entry in row["squads"].items():
            label = f"W:{name}"
            won = _column(rows, label, bot, "outcome", int) == NPC_WIN
            duration = _column(rows, label, bot, "duration_s")
            assert entry["n"] == CONFIG.episodes
            assert entry["win_pct"] == pytest.approx(100 * won.mean())
            assert entry["mean_s"] == pytest.approx(duration.mean())
            assert entry["median_s"] == pytest.approx(np.median(duration))
            lo, hi = entry["ci95"]
            assert lo <= entry["win_pct"] <= hi
            vs = entry["vs_A"]
            assert vs["win_pct_points"] == pytest.approx(entry["win_pct"] - row["A"]["win_pct"])
            assert vs["ci95"][0] <= vs["win_pct_points"] <= vs["ci95"][1]
            mw = stats.mann_whitney(_column(rows, "A", bot, "duration_s"), duration)
            assert vs["mann_whitney"]["U"] == pytest.approx(mw["U"])
            assert vs["mann_whitney"]["p"] == pytest.approx(mw["p"], nan_ok=True)
            assert vs["mann_whitney"]["direction"] == mw["direction"].replace("B ", "squad ")
            assert run["summary"]["descriptive"][label][bot]["npc_win_pct"] == entry["win_pct"]
    assert run["summary"]["mann_whitney"] == {}  # Table 8 stays A vs B


def test_report_and_cli_show_the_squads_beside_a(run, capsys):
    report = (run["dir"] / "report.md").read_text()
    assert "### White-box squads (docs/coder.md)" in report
    table = report.split("### White-box squads (docs/coder.md)")[1].split("\n\n")[1].splitlines()[2:]
    w = run["summary"]["whitebox"]["by_bot"]
    assert len(table) == len(CONFIG.bots) * (1 + len(SQUADS))
    for bot in CONFIG.bots:
        mine = [line.split(" | ") for line in table if line.startswith(f"| {bot.capitalize()} |")]
        assert [cells[1] for cells in mine] == ["A", *SQUADS]
        for cells in mine[1:]:
            assert cells[2].startswith(f"{w[bot]['squads'][cells[1]]['win_pct']:.1f}%")
    policies = run["summary"]["policies"]
    for name in SQUADS:
        assert policies[f"W:{name}"]["sha256"] == "sha256:" + hashlib.sha256(BASELINES[name].encode()).hexdigest()
    print_whitebox(run["summary"]["whitebox"])
    printed = capsys.readouterr().out
    assert all(name in printed for name in SQUADS)


def test_resume_loads_the_w_cells_and_refuses_another_baseline_source(run):
    again = evaluate(CONFIG, run["out"], "w", progress=False, figures=False, cache_path=None)
    assert again["timings"]["computed_cells"] == []
    assert again["whitebox"] == run["summary"]["whitebox"]
    runner = ProtocolRunner(CONFIG, run["dir"], progress=False)
    fp = runner.fingerprint("W")
    assert fp["policy"] == {n: "sha256:" + hashlib.sha256(BASELINES[n].encode()).hexdigest() for n in SQUADS}
    # A cell stored from an edited baseline is another configuration.
    path = runner.cell_path("W", "balanced")
    cell = json.loads(path.read_text())
    cell["fingerprint"]["policy"]["rush"] = "sha256:" + "0" * 64
    path.write_text(json.dumps(cell))
    with pytest.raises(RuntimeError, match="different configuration"):
        runner.load_cell("W", "balanced")


def test_w_is_opt_in_and_named_on_the_command_line(tmp_path):
    parser = build_parser()
    assert config_from_args(parser.parse_args([])).combinations == ("A", "B")
    assert config_from_args(parser.parse_args(["--combinations", "A", "w"])).combinations == ("A", "W")
    with pytest.raises(ValueError, match=f"W plays {len(SQUADS)} squads"):
        ProtocolRunner(CONFIG, tmp_path, progress=False).policy("W")
    # W's squads hold A's tag, whether A plays or not: --tag-a reaches W's cells.
    config = config_from_args(parser.parse_args(["--combinations", "W", "--tag-a", "2"]))
    assert config.options_of("A").tag == 2
    assert ProtocolRunner(config, tmp_path, progress=False).fingerprint("W")["tag"] == 2
    policy, params, checksum, source = resolve_policy("coder:kite")
    assert params is None and source == "coder/baselines/kite.py" and checksum.startswith("sha256:")
    with pytest.raises(ValueError, match="choose from"):
        resolve_policy("coder:nope")

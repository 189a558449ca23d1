"""The protocol end to end on a small budget: outputs, report ↔ summary, resume after a kill, determinism.

Real pieces throughout: the shipped A and B policies, the embedded LLM, the jitted rollout.
Episodes are shortened to 4 decision periods (20 s) to keep the LLM's work small.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from jaxarena.protocol import ProtocolConfig, evaluate
from jaxarena.protocol.runner import ProtocolRunner

# The host LLM path: these runs check its prompt cache (r2 is answered from r1's).
CONFIG = ProtocolConfig(episodes=4, seed=3, policy_b="B", num_periods=4, n_boot=2000, llm_path="host")


class SimulatedKill(Exception):
    pass


def _kill_after_first(name, cell):
    raise SimulatedKill(name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """r1: killed after its first cell, then resumed; r2: the same config from scratch (warm LLM cache)."""
    out = tmp_path_factory.mktemp("results")
    with pytest.raises(SimulatedKill):
        evaluate(CONFIG, out, "r1", progress=False, figures=False, after_cell=_kill_after_first)
    cells_dir = out / "r1" / "cells"
    stored = sorted(p.name for p in cells_dir.iterdir())
    first = cells_dir / "A_aggressive.json"
    before = (first.read_bytes(), first.stat().st_mtime_ns)
    s1 = evaluate(CONFIG, out, "r1", progress=False)
    s2 = evaluate(CONFIG, out, "r2", progress=False, figures=False)
    return {"out": out, "stored_after_kill": stored, "first_before": before, "s1": s1, "s2": s2}


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_kill_leaves_only_whole_cells_and_resume_does_not_recompute(runs):
    out = runs["out"]
    assert runs["stored_after_kill"] == ["A_aggressive.json"]  # no temp files, no partial cells
    first = out / "r1" / "cells" / "A_aggressive.json"
    assert (first.read_bytes(), first.stat().st_mtime_ns) == runs["first_before"]
    t = runs["s1"]["timings"]
    assert t["loaded_cells"] == ["A_aggressive"]
    assert "A_aggressive" not in t["computed_cells"] and len(t["computed_cells"]) == 5
    assert sorted(p.name for p in (out / "r1" / "cells").iterdir()) == sorted(
        f"{c}_{b}.json" for c, b in CONFIG.cells()
    )


def test_resumed_run_equals_uninterrupted_run(runs):
    out = runs["out"]
    assert (out / "r1" / "episodes.csv").read_bytes() == (out / "r2" / "episodes.csv").read_bytes()

    def decisions(run):
        rows = [json.loads(line) for line in (out / run / "decisions.jsonl").read_text().splitlines()]
        keys = ("combination", "bot", "call", "episode", "time_s", "state", "reply", "tag", "fallback")
        return [{k: r[k] for k in keys} for r in rows]

    d1, d2 = decisions("r1"), decisions("r2")
    assert d1 == d2 and len(d1) > 0
    # r2 found every prompt in the cache that r1 filled.
    assert runs["s2"]["llm_counters"]["llm_requests"] == 0


def test_outputs_are_complete_and_consistent(runs):
    run_dir = runs["out"] / "r1"
    s = json.loads((run_dir / "summary.json").read_text())
    rows = list(csv.DictReader((run_dir / "episodes.csv").open()))
    assert len(rows) == 6 * CONFIG.episodes
    decisions = (run_dir / "decisions.jsonl").read_text().splitlines()
    assert len(decisions) == s["tags"]["overall"]["total"] == sum(int(r["decisions"]) for r in rows)
    assert s["policies"]["A"]["sha256"].startswith("sha256:") and len(s["policies"]["A"]["sha256"]) == 71
    assert s["llm"]["backend"] == "embedded"
    assert s["tags"]["replied"]["total"] == s["tags"]["overall"]["total"] - s["fallbacks"]["overall"]["total"]
    # The embedded model decodes by choice: no fallbacks, and every decision carries the model's probabilities.
    records = [json.loads(line) for line in decisions]
    assert s["fallbacks"]["overall"]["total"] == 0 and {r["decode"] for r in records} == {"choice"}
    assert all(len(r["probs"]) == 4 and abs(sum(r["probs"]) - 1) < 1e-4 for r in records)
    assert s["tags"]["probs"]["overall"]["n"] == len(records)
    assert (
        s["tags"]["probs"]["overall"]["top1"]
        == np.bincount([int(np.argmax(r["probs"])) for r in records], minlength=4).tolist()
    )
    figures = ("fig5_durations_A.png", "fig6_durations_B.png", "fig7_outcomes.png", "fig8_a_vs_b.png", "fig9_tags.png")
    for fig in figures:
        assert (run_dir / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Paired design: A and B episodes of a bot share their keys.
    for bot in CONFIG.bots:
        a = [r["episode_key"] for r in rows if r["combination"] == "A" and r["bot"] == bot]
        b = [r["episode_key"] for r in rows if r["combination"] == "B" and r["bot"] == bot]
        assert a == b and len(set(a)) == CONFIG.episodes
    # The CSV is the source of the descriptive statistics.
    for comb in ("A", "B"):
        for bot in CONFIG.bots:
            d = np.array([float(r["duration_s"]) for r in rows if r["combination"] == comb and r["bot"] == bot])
            assert s["descriptive"][comb][bot]["mean_s"] == pytest.approx(d.mean(), abs=1e-6)
    assert not list(run_dir.glob(".*.tmp"))


def _tables(markdown: str) -> dict[str, list[list[str]]]:
    """The first markdown table under each "### " heading: rows of cell strings (header and rule dropped)."""
    tables, title, rows, closed = {}, None, None, False
    for line in markdown.splitlines():
        if line.startswith("### "):
            title, rows, closed = line[4:], [], False
            tables[title] = rows
        elif line.startswith("|") and title is not None and not closed:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows:
            closed = True  # the first table under this heading has ended
    return {k: v[1:] for k, v in tables.items()}  # drop header rows


def _num(text: str) -> float:
    return float(re.match(r"[-+]?[0-9.]+(e[-+]?[0-9]+)?", text.replace("%", "")).group(0))


def test_report_tables_parse_back_to_summary(runs):
    run_dir = runs["out"] / "r1"
    s = json.loads((run_dir / "summary.json").read_text())
    tables = _tables((run_dir / "report.md").read_text())
    keys = ("mean_s", "median_s", "std_s", "npc_win_pct", "bot_win_pct", "timeout_pct")
    for comb, prefix in (("A", "Table 6."), ("B", "Table 7.")):
        (title,) = [t for t in tables if t.startswith(prefix)]
        ours = [r for r in tables[title] if r[1].startswith("ours")]
        assert len(ours) == 3
        for row in ours:
            ref = s["descriptive"][comb][row[0].lower()]
            for text, key in zip(row[2:8], keys, strict=True):
                assert _num(text) == pytest.approx(ref[key], abs=0.051 if key.endswith("pct") else 0.0051)
            lo, hi = (float(x) for x in row[8].split("–"))
            assert (lo, hi) == pytest.approx(ref["ci95"]["npc_win"], abs=0.051)
        paper = [r for r in tables[title] if r[1].startswith("paper")]
        assert _num(paper[0][2]) == (77.72 if comb == "A" else 66.54)
    (title,) = [t for t in tables if t.startswith("Table 8.")]
    for row in (r for r in tables[title] if r[1].startswith("ours")):
        m = s["mann_whitney"][row[0].lower()]
        assert _num(row[2]) == pytest.approx(m["U"], abs=0.05)
        assert _num(row[3]) == pytest.approx(m["p"], rel=1e-3, abs=5e-5)
        assert row[3].endswith(m["stars"])
        assert _num(row[4]) == pytest.approx(m["r"], abs=5e-4)
        assert _num(row[5]) == pytest.approx(m["r_rb"], abs=5e-4)
        assert row[6] == m["direction"]
    (title,) = [t for t in tables if t.startswith("Table 9.")]
    assert [int(r[2]) for r in tables[title]] == s["tags"]["overall"]["counts"]
    # The first paragraph says which of the paper's findings reproduced, as summary.json's "findings" has it.
    paragraphs = (run_dir / "report.md").read_text().split("\n\n")
    assert paragraphs[1].startswith("**What reproduced.**")
    verdicts = [f[kind]["reproduced"] for f in s["findings"].values() for kind in ("win", "length")]
    assert f"{sum(verdicts)} reproduced here" in paragraphs[1]
    # The embedded, untuned LLM is named as not the paper's, with the tags it chose in this run.
    assert paragraphs[3].startswith("B's LLM here is the embedded SmolLM2-135M without tuning; its tags in this run:")
    shares = [int(x) for x in re.findall(r"(?:Surround|Aggressive|Flank|Retreat) (\d+)%", paragraphs[3])]
    assert shares == [round(p) for p in s["tags"]["overall"]["pct"]]
    bullets = paragraphs[2].splitlines()
    for bot, line in zip(CONFIG.bots, bullets, strict=True):
        assert line.startswith(f"- **{bot.capitalize()} bot.**")
        said = re.findall(r": (not reproduced|reproduced)\.", line)
        verdict = {True: "reproduced", False: "not reproduced"}
        assert said == [verdict[s["findings"][bot][kind]["reproduced"]] for kind in ("win", "length")]
    assert [int(r[4]) for r in tables[title]] == [2036, 103, 107, 184]


def test_stored_cells_of_another_configuration_are_refused(runs):
    other = ProtocolConfig(**{**CONFIG.as_dict(), "bots": CONFIG.bots, "combinations": CONFIG.combinations, "seed": 4})
    runner = ProtocolRunner(other, runs["out"] / "r1", progress=False)
    with pytest.raises(RuntimeError, match="different configuration"):
        runner.run()


def test_cli_runs_combination_a_alone_and_is_deterministic(tmp_path, capsys):
    from jaxarena.protocol.cli import main

    args = ["--episodes", "3", "--combinations", "A", "--seed", "5", "--out", str(tmp_path), "--no-progress"]
    assert main(args + ["--run-id", "one"]) == 0
    assert "A balanced" in capsys.readouterr().out
    assert main(args + ["--run-id", "two", "--no-figures"]) == 0
    one, two = tmp_path / "one", tmp_path / "two"
    assert (one / "episodes.csv").read_bytes() == (two / "episodes.csv").read_bytes()
    report = (one / "report.md").read_text()
    assert "Table 6." in report and "Table 7." not in report and "Table 8." not in report
    assert (one / "decisions.jsonl").read_text() == ""
    assert not (two / "fig5_durations_A.png").exists() and (one / "fig5_durations_A.png").exists()


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_ollama_backend_path_with_faults(tmp_path):
    """`--llm ollama --model mistral` end to end against the local Ollama stand-in (real HTTP).

    Its hash-digit responder answers 0-3, so B's tags really vary; injected garbage
    replies and HTTP 500s must show up as fallbacks, counted by cause, not as crashes.
    """
    from jaxarena.llm.testing import ServerProcess

    with ServerProcess(
        responder="hash-digit", models=["mistral:latest"], ready_timeout_s=60, p_garbage=0.15, p_http_500=0.1, seed=1
    ) as server:
        config = ProtocolConfig(
            episodes=6,
            seed=2,
            bots=("balanced",),
            policy_b="A",
            llm="ollama",
            model="mistral",
            host=server.url,
            num_periods=4,
            n_boot=500,
        )
        s = evaluate(config, tmp_path, progress=False, figures=False, cache_path=None)
    assert s["llm"]["backend"] == "ollama" and s["llm"]["model"] == "mistral"
    assert s["llm"]["options"]["num_predict"] == 3 and s["llm"]["options"]["temperature"] == 0.1
    rows = [json.loads(line) for line in (Path(s["run_dir"]) / "decisions.jsonl").read_text().splitlines()]
    assert rows and {r["backend"] for r in rows} == {"ollama"}
    fb = s["fallbacks"]["overall"]
    assert fb["non_numeric"] > 0 and fb["error"] > 0
    assert fb["total"] == sum(1 for r in rows if r["fallback"])
    assert sum(1 for c in s["tags"]["replied"]["counts"] if c > 0) >= 3  # the tags really vary
    assert "ollama-mistral-n6-seed2-" in s["run_dir"]

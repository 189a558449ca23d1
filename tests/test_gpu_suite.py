"""The speed suite runs its steps in child processes, logs every line, and writes its table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_suite.py"


def run_suite(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, list[dict], str]:
    done = subprocess.run(
        [sys.executable, str(SUITE), "--out", str(tmp_path), "--mode", "smoke", *extra],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    return done, lines, (tmp_path / "results.md").read_text()


def load_suite(monkeypatch):
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("gpu_suite", SUITE)
    suite = module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_suite", suite)  # its dataclasses look their module up there
    spec.loader.exec_module(suite)
    return suite


def test_the_whole_suite_leaves_the_opt_in_step_out_and_only_runs_named_steps(monkeypatch):
    suite = load_suite(monkeypatch)
    whole = [s.name for s in suite.selected_steps(None)]
    assert "coder_racing" not in whole and "env_sweep" in whole and len(whole) == len(suite.STEPS) - 1
    assert [s.name for s in suite.selected_steps(["coder_racing", "env_sweep"])] == ["env_sweep", "coder_racing"]


def test_smoke_step_logs_lines_and_table(tmp_path):
    done, lines, table = run_suite(tmp_path, "--only", "env_sweep")
    assert done.returncode == 0, done.stderr[-2000:]
    measured = [r for r in lines if r.get("bench") == "env_throughput"]
    assert [r["n_envs"] for r in measured] == [64, 1024]
    assert all(r["suite_step"] == "env_sweep" and r["env_steps_per_s"] > 0 for r in measured)
    assert {"suite_step": "env_sweep", "mode": "smoke", "status": "ok"}.items() <= lines[-1].items()
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["bench"] == "gpu_suite_summary" and summary["failed"] == []
    assert "| env_sweep | ok |" in table and "N=1,024:" in table


def test_gguf_step_skipped_without_a_model_and_bad_path_refused(tmp_path):
    done, lines, table = run_suite(tmp_path, "--only", "llm_gguf")
    assert done.returncode == 0
    assert lines[-1]["status"] == "skipped (no --gguf)" and "| llm_gguf | skipped (no --gguf) |" in table
    bad = subprocess.run(
        [sys.executable, str(SUITE), "--out", str(tmp_path), "--gguf", str(tmp_path / "no.gguf")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "no such file" in bad.stderr


@pytest.mark.long  # the whole GPU suite's smoke run on the CPU: about 4 min on 2 cores
def test_whole_smoke_suite_passes_on_cpu(tmp_path):
    """Every step but the GGUF one (no model file here) and the opt-in coder_racing runs small on a CPU and reports
    its figures."""
    done, lines, table = run_suite(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    status = {r["suite_step"]: r["status"] for r in lines if "status" in r}
    assert status.pop("llm_gguf") == "skipped (no --gguf)"
    assert set(status.values()) == {"ok"}, status
    for step in status:  # each step's headline cell is filled from its own lines
        row = next(line for line in table.splitlines() if line.startswith(f"| {step} |"))
        assert row.split("|")[4].strip(), row


@pytest.mark.slow
def test_coder_racing_runs_only_when_named_and_reports_its_targets(tmp_path):
    done, lines, table = run_suite(tmp_path, "--only", "coder_racing")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = next(r for r in lines if r.get("mode") == "summary" and r.get("suite_step") == "coder_racing")
    assert summary["candidates_per_min"] > 0 and -1 <= summary["kendall_tau"] <= 1
    assert "| coder_racing | ok |" in table and "raced " in table and "tau " in table

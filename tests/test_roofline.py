"""The roofline benchmark's cost analysis and its old-against-new harness, at a tiny size."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "env_roofline.py"


def _script(name: str = "env_roofline"):
    """The benchmark script `benchmarks/NAME.py` as a module."""
    return load_script(SCRIPT.parent / f"{name}.py", name)


def test_step_cost_is_positive_and_per_env_step():
    roofline = _script()
    small, large = roofline.step_cost(8), roofline.step_cost(32)
    assert small["flops_per_step"] > 100 and small["bytes_per_step"] > 100
    # Per env-step: dividing by the batch makes the figure independent of it (within a few %).
    assert large["flops_per_step"] == pytest.approx(small["flops_per_step"], rel=0.1)


@pytest.mark.slow
def test_script_runs_at_a_tiny_size_and_times_a_ref_against_this_tree():
    cmd = [sys.executable, str(SCRIPT), "--n", "16", "--steps", "5", "--rounds", "2", "--matmul", "64"]
    cmd += ["--copy-mib", "1", "--baseline-ref", "HEAD"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=SCRIPT.parents[1], env=dict(os.environ))
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    summary = lines[-1]
    assert summary["bench"] == "env_roofline"
    assert 0 < summary["flops_fraction"] and 0 < summary["bytes_fraction"]
    assert set(summary["profile_share"]) == {"bots", "collisions", "orbs", "observation", "reward", "auto_reset"}
    assert summary["new_over_old_median"] > 0


@pytest.mark.slow  # two small programs, then seven flag workers each compiling one (~35 s on 2 cores)
def test_the_layout_script_finds_the_batch_last_step_bit_identical_and_times_flag_workers():
    script = SCRIPT.parent / "env_layout.py"
    cmd = [sys.executable, str(script), "--n", "8", "--steps", "5", "--rounds", "1", "--flag-sets"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=SCRIPT.parents[1], env=dict(os.environ))
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    layout = next(line for line in lines if line.get("summary") == "layout")
    assert layout["bit_identical"] is True and layout["minor_over_major"] > 0
    flags = next(line for line in lines if line.get("summary") == "flags")
    assert flags["same_state"]["--xla_cpu_use_thunk_runtime=false"] is True
    assert set(flags["cpu_speedup"]) == {f for f in _script("env_layout").FLAG_SETS if f}


def test_the_batched_step_costs_per_env_step_too():
    roofline = _script()
    small, large = roofline.step_cost(8, batched=True), roofline.step_cost(32, batched=True)
    assert small["flops_per_step"] > 100 and small["bytes_per_step"] > 100
    assert large["flops_per_step"] == pytest.approx(small["flops_per_step"], rel=0.1)


@pytest.mark.slow  # two scan programs and two tick programs (~40 s on 2 cores)
def test_the_batched_benchmark_agrees_tick_by_tick_and_times_both_steps():
    script = SCRIPT.parent / "env_batched.py"
    cmd = [sys.executable, str(script), "--n", "16", "--steps", "5", "--rounds", "1", "--check-ticks", "3"]
    cmd += ["--outcome-steps", "20"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=SCRIPT.parents[1], env=dict(os.environ))
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    check = next(line for line in lines if "check" in line)
    assert check["same_outcomes"] is True and check["max_abs_diff"] < 1e-3
    summary = lines[-1]
    assert summary["summary"] == "batched" and summary["batched_over_vmap"] > 0
    assert set(summary["outcomes_npc_bot_timeout"]) == {"vmap", "batched"}

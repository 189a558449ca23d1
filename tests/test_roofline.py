"""The roofline benchmark's cost analysis and its old-against-new harness, at a tiny size."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "env_roofline.py"


def _roofline():
    spec = importlib.util.spec_from_file_location("env_roofline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_step_cost_is_positive_and_per_env_step():
    roofline = _roofline()
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

"""The training command: a tiny run, then a resumed one extending it, in one process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxarena.algorithms.checkpoint import has_checkpoint, load_policy, read_config
from jaxarena.algorithms.train_loop import main

TINY = [
    "--num-envs",
    "6",
    "--num-steps",
    "8",
    "--hidden",
    "8",
    "--chunk",
    "2",
    "--no-progress",
    # main() runs in pytest's own process here: leave its XLA flags (and its children's) as they are.
    "--keep-xla-flags",
    "--set",
    "update_epochs=1",
    "num_minibatches=2",
]


@pytest.mark.slow
def test_train_script_writes_everything_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--combination", "B", "--total-steps", str(6 * 8 * 3), "--out", str(out), *TINY]) == 0
    assert has_checkpoint(out)
    assert read_config(out).combination == "B"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3]
    assert (out / "learning_curve.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "checkpoint:" in printed and "metrics:" in printed

    # Same --out, a larger budget: resumes at update 3 (no --resume needed) and appends.
    assert main(["--total-steps", str(6 * 8 * 5), "--out", str(out), *TINY]) == 0
    assert "resumed" in capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3, 4, 5]
    csv_lines = (out / "metrics.csv").read_text().splitlines()
    assert len(csv_lines) == 6  # header + 5 rows
    policy, params = load_policy(out, greedy=True)
    assert policy(params, np.zeros((5, 23), np.float32)).shape == (5,)

    # Changing a fixed hyper-parameter of an existing run is refused, in one line.
    assert main(["--out", str(out), "--lr", "0.1", *TINY]) == 2
    assert "cannot change ['lr']" in capsys.readouterr().err
    # --fresh starts over.
    assert main(["--combination", "A", "--total-steps", str(6 * 8 * 2), "--out", str(out), "--fresh", *TINY]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2]


@pytest.mark.slow
def test_warm_start_from_the_shipped_b_freezes_and_restarts_the_chosen_experts(tmp_path, capsys):
    """--init-from B with Surround, Aggressive and Flank frozen and Retreat restarted (raid's recipe)."""
    import jax

    from jaxarena.algorithms.checkpoint import load_params

    out = tmp_path / "retreat"
    args = ["--combination", "B", "--env", "ArenaFormation-v2", "--total-steps", str(6 * 8 * 2), "--out", str(out)]
    experts = ["tag_experts=true", "tag_one_hot=false", "recipe=obey", "frozen_tags=[0,1,2]", "fresh_tags=[3]"]
    assert main([*args, "--init-from", "B", *TINY, *experts, "--hidden", "64"]) == 0
    # The same command again resumes the finished run: the --set lists equal the stored config.
    assert main([*args, "--init-from", "B", *TINY, *experts, "--hidden", "64"]) == 0
    assert "resumed" in capsys.readouterr().out
    _, shipped = load_params("B")
    _, trained = load_params(out)
    for name, warm in shipped["params"].items():
        gap = max(
            float(np.max(np.abs(a - b)))
            for a, b in zip(jax.tree.leaves(warm), jax.tree.leaves(trained["params"][name]), strict=True)
        )
        # Experts 0-2 are B's to the bit. Expert 3 (layers 6, 7 and out_3) started over: two updates
        # at lr 3e-4 move a weight by about 1e-3, a fresh draw by far more.
        assert gap > 0.1 if name.endswith(("_6", "_7", "_out_3")) else gap == 0.0, (name, gap)

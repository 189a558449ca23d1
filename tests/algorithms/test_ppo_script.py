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
    # 144 env steps are inside the collapse checks' grace period: the verdict is written, and clear.
    summary = json.loads((out / "summary.json").read_text())
    assert summary["collapse"] == {"collapsing": False, "flag": None, "events": []}
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


def _strict(token: str):
    raise ValueError(f"not JSON: {token}")


def test_metrics_jsonl_is_strict_json_with_null_for_a_missing_number_and_reads_back_as_nan(tmp_path):
    from jaxarena.algorithms.train_metrics import MetricsLog

    row = {"update": 1, "env_steps": 32, "return_mean": float("nan"), "entropy": float("inf"), "wall_s": 0.5}
    log = MetricsLog(tmp_path, 0)
    log.append([row, {**row, "update": 2, "env_steps": 64, "return_mean": 0.25, "entropy": 1.5}])
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line, parse_constant=_strict) for line in lines]  # NaN, Infinity: refused
    assert [(r["return_mean"], r["entropy"]) for r in rows] == [(None, None), (0.25, 1.5)]
    # A resume reads the rows back with NaN where no number was, as the run held them.
    resumed = MetricsLog(tmp_path, 2)
    assert np.isnan(resumed.rows[0]["return_mean"]) and np.isnan(resumed.rows[0]["entropy"])
    assert resumed.rows[1]["return_mean"] == 0.25
    rows = [json.loads(line, parse_constant=_strict) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["return_mean"] is None  # and rewrites them strict too


def _rows_without_wall_time(run) -> list[str]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [json.dumps({k: v for k, v in row.items() if k != "wall_s"}, sort_keys=True) for row in rows]


@pytest.mark.slow  # two tiny runs compiled in-process: over ~10 s on 2 cores
def test_a_runs_config_json_given_back_as_config_reproduces_its_metrics(tmp_path):
    first = tmp_path / "first"
    argv = ["--seed", "5", "--total-steps", str(6 * 8 * 2), "--set", 'arena={"bot_hp": 450}', "ent_coef=0.03"]
    assert main([*argv, "--out", str(first), *TINY]) == 0
    again = tmp_path / "again"
    assert main(["--config", str(first / "config.json"), "--out", str(again), "--no-progress", "--keep-xla-flags"]) == 0
    assert read_config(again) == read_config(first)
    assert _rows_without_wall_time(again) == _rows_without_wall_time(first)  # the same metrics, bit for bit


def test_a_toml_config_sets_a_new_run_and_options_override_it(tmp_path, capsys):
    from jaxarena.algorithms.train_loop import _config_from_args, parse_args

    toml = tmp_path / "recipe.toml"
    toml.write_text('bots = ["evasive"]\ntotal_timesteps = 4_000_000\nlr = 1e-4\n[arena]\nbot_hp = 600\n')
    config = _config_from_args(parse_args(["--config", str(toml), "--lr", "2e-4", "--out", str(tmp_path / "r")]), None)
    assert config.bots == ("evasive",) and config.total_timesteps == 4_000_000 and config.lr == 2e-4
    assert config.arena == (("bot_hp", 600.0),)
    assert config.approach_shaping == 0.0  # the file is the recipe: no preset applies under it
    for text, says in (("learning_rate = 1e-4\n", "'learning_rate'] are not settings"), ("bots = [\n", "not valid")):
        toml.write_text(text)
        assert main(["--config", str(toml), "--out", str(tmp_path / "r")]) == 2
        assert says in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "r")]) == 2
    assert ".json or .toml" in capsys.readouterr().err
    assert main(["--config", str(toml), "--preset", "fast", "--out", str(tmp_path / "r")]) == 2
    assert "give one" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()

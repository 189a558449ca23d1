"""The fast PPO recipe: a named preset beside the shipped defaults, trained, saved and resumed like them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import chex
import jax
import numpy as np
import pytest

from jaxarena.algorithms import PPOConfig, make_trainer
from jaxarena.algorithms.checkpoint import read_config, resolve_path
from jaxarena.algorithms.config import FAST_RECIPE, PRESETS, default_preset
from jaxarena.algorithms.train_loop import main

ROOT = Path(__file__).resolve().parents[2]
TINY_SIZES = {"num_envs": 6, "num_steps": 8, "hidden": 8}


def test_the_classic_preset_is_the_shipped_recipe_and_fast_differs_only_where_named():
    shipped = json.loads((resolve_path("A") / "config.json").read_text())
    classic = PPOConfig.preset("classic")
    assert classic == PPOConfig()
    for name in ("update_epochs", "num_minibatches", "lr", "num_envs", "num_steps", "hidden", "ent_coef"):
        assert classic.to_dict()[name] == shipped[name], name
    fast = PPOConfig.fast()
    changed = {k for k, v in fast.to_dict().items() if v != classic.to_dict()[k]}
    assert changed and changed <= set(FAST_RECIPE)
    assert fast.update_epochs < classic.update_epochs  # the point of it: fewer gradient samples per env step
    assert PPOConfig.preset("fast", lr=1e-4).lr == 1e-4  # later changes override the preset
    assert PPOConfig.from_dict(json.loads(fast.to_json())) == fast
    with pytest.raises(ValueError, match="preset must be one of"):
        PPOConfig.preset("fastest")
    # Every preset spells out the same fields, so resuming with another preset is refused.
    assert all(set(recipe) == set(PRESETS["classic"]) for recipe in PRESETS.values())
    assert set(FAST_RECIPE) < set(PRESETS["classic"])


def test_the_default_preset_is_the_drill_with_the_approach_shaping_and_a_new_A_run_gets_it():
    default = PPOConfig.preset("default")
    assert default.approach_shaping > 0 and default.approach_range > 0
    assert (PPOConfig().approach_shaping, PPOConfig().approach_range) == (0.0, 0.0)
    assert default.ent_coef_end is None and default.total_timesteps < PPOConfig().total_timesteps
    undone = {"approach_shaping": 0.0, "approach_range": 0.0, "ent_coef_end": 0.0, "total_timesteps": 25_000_000}
    assert default.replace(**undone) == PPOConfig.preset("fast_evasive")
    assert PPOConfig.from_dict(json.loads(default.to_json())) == default
    # A config written before the field existed loads without the shaping, as it was trained.
    old = {k: v for k, v in json.loads(PPOConfig().to_json()).items() if not k.startswith("approach_")}
    assert (PPOConfig.from_dict(old).approach_shaping, PPOConfig.from_dict(old).approach_range) == (0.0, 0.0)
    assert (default_preset("A"), default_preset("B")) == ("default", "classic")


def test_the_fast_evasive_preset_is_the_fast_recipe_against_the_evasive_bot_alone():
    drill = PPOConfig.preset("fast_evasive")
    assert drill.bots == ("evasive",)
    assert drill.replace(bots=PPOConfig().bots) == PPOConfig.fast()
    assert PPOConfig.from_dict(json.loads(drill.to_json())) == drill


def test_the_fast_preset_trains():
    cfg = PPOConfig.fast(**TINY_SIZES, total_timesteps=6 * 8 * 4)
    trainer = make_trainer(cfg, mesh=None)
    rs0 = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    rs, metrics = jax.jit(trainer.run_updates, static_argnums=1)(rs0, 2)
    chex.assert_shape(metrics["total_loss"], (2,))
    assert np.all(np.isfinite(np.asarray(metrics["total_loss"])))
    assert int(rs.update) == 2
    moved = jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), rs.train_state.params, rs0.train_state.params)
    assert max(jax.tree.leaves(moved)) > 0.0
    # One epoch of fast's minibatches: that many Adam steps per update.
    assert int(rs.train_state.step) == 2 * cfg.update_epochs * cfg.num_minibatches


@pytest.mark.slow  # two tiny runs compiled in-process: over ~20 s on 2 shared cores
def test_the_fast_preset_round_trips_through_the_cli_run_config_and_resume(tmp_path, capsys):
    out = tmp_path / "run"
    tiny = ["--num-envs", "6", "--num-steps", "8", "--hidden", "8", "--chunk", "2", "--no-progress", "--keep-xla-flags"]
    assert main(["--preset", "fast", "--total-steps", str(6 * 8 * 2), "--out", str(out), *tiny]) == 0
    saved = read_config(out)
    assert saved == PPOConfig.fast(**TINY_SIZES, total_timesteps=6 * 8 * 2)
    # Resumes with the preset named again, or with no preset (the run's config.json holds it).
    assert main(["--preset", "fast", "--total-steps", str(6 * 8 * 3), "--out", str(out), *tiny]) == 0
    assert main(["--total-steps", str(6 * 8 * 4), "--out", str(out), *tiny]) == 0
    assert "resumed" in capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3, 4]
    assert read_config(out).update_epochs == FAST_RECIPE["update_epochs"]
    # The other preset would change the run's recipe: refused, in one line.
    assert main(["--preset", "classic", "--out", str(out), *tiny]) == 2
    assert "cannot change" in capsys.readouterr().err


@pytest.mark.slow  # compiles both presets' update programs and an episode runner in a subprocess
def test_time_to_policy_smoke_mode_reports_the_old_and_the_new_recipe(tmp_path):
    script = ROOT / "benchmarks" / "time_to_policy.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--smoke", "--out", str(tmp_path), "--set", "anneal_steps=1e6"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = lines[-1]["summary"]
    assert {"classic", "default", "speedup", "speedup_at_least", "seeds", "load_before"} <= set(summary)
    for preset in ("classic", "default"):
        assert summary[preset]["time_to_policy_s"] > 0  # the smoke bars are 0: the first full check passes
        assert summary[preset]["passed"] == "1/1"
    assert summary["speedup"] > 0 and summary["speedup_at_least"] == summary["speedup"]  # the same seeds passed
    points = lines[:-1]
    assert {p["preset"] for p in points} == {"classic", "default"}
    for p in points:
        assert {"env_steps", "train_s", "eval_s", "win_balanced", "win_evasive", "kind", "load1"} <= set(p)
        assert all(0.0 <= p[f"win_{bot}"] <= 1.0 for bot in ("aggressive", "balanced", "evasive"))
    assert len((tmp_path / "curve.jsonl").read_text().splitlines()) == len(points)


@pytest.mark.slow  # a tiny run compiled in-process, twice
def test_an_interrupted_run_says_how_to_resume_and_the_same_command_does(tmp_path, capsys, monkeypatch):
    from jaxarena.algorithms import train_metrics

    command = ["--total-steps", str(6 * 8 * 4), "--out", str(tmp_path / "run"), "--chunk", "2", "--no-progress"]
    command += ["--num-envs", "6", "--num-steps", "8", "--hidden", "8", "--keep-xla-flags"]
    calls = {"n": 0}
    real = train_metrics.host_metrics

    def ctrl_c_in_the_second_chunk(metrics, i):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(metrics, i)

    monkeypatch.setattr(train_metrics, "host_metrics", ctrl_c_in_the_second_chunk)
    assert main(command) == 130
    err = capsys.readouterr().err
    assert "jaxarena-train: interrupted; the unfinished chunk is lost" in err and "run the same command again" in err
    assert "Traceback" not in err
    monkeypatch.setattr(train_metrics, "host_metrics", real)
    assert main(command) == 0
    assert "at update 2/4" in capsys.readouterr().out
    # Stopped in its first chunk, a run has nothing saved, and says so.
    calls["n"] = 2
    monkeypatch.setattr(train_metrics, "host_metrics", ctrl_c_in_the_second_chunk)
    fresh = [*command, "--fresh"]
    fresh[fresh.index("--out") + 1] = str(tmp_path / "early")
    assert main(fresh) == 130
    assert "no checkpoint was saved yet" in capsys.readouterr().err


def test_anneal_steps_is_the_schedules_length_and_defaults_to_the_runs():
    per_update = TINY_SIZES["num_envs"] * TINY_SIZES["num_steps"]
    short = PPOConfig.fast(**TINY_SIZES, total_timesteps=2 * per_update)
    adam_steps = short.update_epochs * short.num_minibatches
    assert short.anneal_grad_steps == 2 * adam_steps
    assert short.replace(anneal_steps=2 * per_update).anneal_grad_steps == short.anneal_grad_steps
    assert short.replace(anneal_steps=4 * per_update).anneal_grad_steps == 4 * adam_steps
    assert PPOConfig.from_dict(json.loads(short.replace(anneal_steps=99).to_json())).anneal_steps == 99
    assert short.replace(anneal_steps=5e7).anneal_steps == 50_000_000  # as `--set anneal_steps=5e7` gives it
    with pytest.raises(ValueError, match="anneal_steps must be >= 1"):
        short.replace(anneal_steps=0)


def _params_after(cfg: PPOConfig, updates: int):
    trainer = make_trainer(cfg, mesh=None)
    state, _ = jax.jit(trainer.run_updates, static_argnums=1)(jax.jit(trainer.init)(jax.random.PRNGKey(3)), updates)
    return state.train_state.params


@pytest.mark.slow  # three tiny trainers compiled in-process: ~25 s on 2 shared cores
def test_a_horizon_past_the_run_trains_the_first_updates_of_a_run_that_long():
    per_update = TINY_SIZES["num_envs"] * TINY_SIZES["num_steps"]
    short = PPOConfig.fast(**TINY_SIZES, total_timesteps=2 * per_update)
    cut = _params_after(short.replace(anneal_steps=4 * per_update), 2)
    chex.assert_trees_all_equal(cut, _params_after(short.replace(total_timesteps=4 * per_update), 2))
    # The schedule is what differs from the short run's own: a slower anneal changes the updates.
    moved = jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), cut, _params_after(short, 2))
    assert max(jax.tree.leaves(moved)) > 0.0


def test_time_to_policy_sets_config_fields_and_refuses_unknown_ones(capsys):
    from conftest import load_script

    ttp = load_script(ROOT / "benchmarks" / "time_to_policy.py", "time_to_policy")
    args = ttp.parse(["--set", "ent_coef=0.03", "anneal_steps=5e7", "activation=relu"])
    assert args.changes == {"ent_coef": 0.03, "anneal_steps": 5e7, "activation": "relu"}
    assert PPOConfig.preset("fast", **args.changes).anneal_steps == 50_000_000
    for bad in ("entropy=0.03", "ent_coef", "total_timesteps=1e6"):  # the schedule is --total-steps'
        with pytest.raises(SystemExit) as exit_info:
            ttp.parse(["--set", bad])
        assert exit_info.value.code == 2
        assert "not KEY=VALUE with KEY one of" in capsys.readouterr().err


def test_time_to_policy_speedup_is_exact_on_the_same_seeds_and_a_lower_bound_where_old_failed_some():
    from types import SimpleNamespace

    from conftest import load_script

    ttp = load_script(ROOT / "benchmarks" / "time_to_policy.py", "time_to_policy")

    def run(preset, seed, passed, seconds):  # a finished run: train_s is its time-to-policy where it passed
        ttp_s = seconds if passed else None
        return SimpleNamespace(
            preset=preset, seed=seed, result={"passed": passed, "time_to_policy_s": ttp_s, "train_s": seconds}
        )

    both = [
        run("old", 0, True, 300.0),
        run("new", 0, True, 60.0),
        run("old", 1, True, 100.0),
        run("new", 1, True, 40.0),
    ]
    assert ttp.speedups(both, "old", "new") == (4.0, 4.0)  # (300 + 100) / (60 + 40)
    # Old ran 330 s on seed 1 without passing: its time-to-policy there is above 330 s.
    some = [both[0], both[1], run("old", 1, False, 330.0), both[3]]
    assert ttp.speedups(some, "old", "new") == (None, 6.3)  # (300 + 330) / (60 + 40)
    # A seed both failed counts for neither: the same seeds passed, so the ratio is exact.
    some[3] = run("new", 1, False, 500.0)
    assert ttp.speedups(some, "old", "new") == (5.0, 5.0)
    # Old passing a seed new failed leaves no bound.
    assert ttp.speedups([*both[:3], run("new", 1, False, 500.0)], "old", "new") == (None, None)
    assert ttp.speedups([run("old", 0, True, 9.0), run("new", 0, False, 9.0)], "old", "new") == (None, None)

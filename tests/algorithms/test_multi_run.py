"""Many runs in one program: vmapped seeds equal runs one at a time, hyper-parameters travel per run,
sweeps group by program, and the training command writes, logs, summarises and resumes every run."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.algorithms import PPOConfig, make_train, make_trainer
from jaxarena.algorithms.batch_runs import run_fns
from jaxarena.algorithms.bot_training import DEFAULT_CONFIG as BOT_CONFIG
from jaxarena.algorithms.bot_training import BotActorCritic
from jaxarena.algorithms.checkpoint import has_checkpoint, load_params, read_config
from jaxarena.algorithms.config import parse_field
from jaxarena.algorithms.driver import take
from jaxarena.algorithms.multi_run import group_runs, make_batch_trainer, parse_sweep, plan_runs
from jaxarena.algorithms.ppo_core import make_core_trainer
from jaxarena.algorithms.train_loop import main
from jaxarena.bot_arena import BotArena
from jaxarena.key_streams import training_key

SMALL = dict(num_envs=6, num_steps=8, hidden=8, update_epochs=1, num_minibatches=2, total_timesteps=6 * 8 * 2)
TINY = ["--num-envs", "6", "--num-steps", "8", "--hidden", "8", "--chunk", "2", "--no-progress", "--keep-xla-flags"]
TINY += ["--set", "update_epochs=1", "num_minibatches=2"]


def max_diff(a, b) -> float:
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def test_vmapped_seeds_equal_runs_one_at_a_time():
    cfg = PPOConfig(**SMALL)
    train = jax.jit(make_train(cfg, mesh=None))
    keys = jax.random.split(jax.random.PRNGKey(7), 3)
    batched, metrics = train(keys)
    chex.assert_tree_shape_prefix(batched.train_state.params, (3,))
    chex.assert_shape(metrics["entropy"], (3, cfg.num_updates))
    for i in range(3):
        single, single_metrics = train(keys[i])
        assert max_diff(take(batched.train_state.params, i), single.train_state.params) < 1e-4
        np.testing.assert_allclose(metrics["total_loss"][i], single_metrics["total_loss"], atol=1e-4)
    # Different seeds train different squads.
    assert max_diff(take(batched.train_state.params, 0), take(batched.train_state.params, 1)) > 1e-2


def lapack_operand_ranks(jaxpr) -> list[int]:
    """The rank of every QR-family operand in `jaxpr`, nested jaxprs (scan, cond, pjit) included."""
    ranks = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("geqrf", "geqp3", "householder_product", "qr"):
            ranks.append(eqn.invars[0].aval.ndim)
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    ranks += lapack_operand_ranks(inner)
    return ranks


def _selector_trainer():
    from jaxarena.selector.train import SelectorConfig, build

    config = SelectorConfig(num_envs=4, num_steps=4, total_decisions=4 * 4, learned_slots=0)
    env, network, _, _ = build(config)
    return make_core_trainer(env, network, config.core())


def _bot_trainer():
    _, params = jaxarena.make("Arena-v0")
    env = BotArena(lambda p, obs, key: jnp.zeros(obs.shape[:-1], jnp.int32), {}, params, 4)
    return make_core_trainer(env, BotActorCritic(hidden=8), dataclasses.replace(BOT_CONFIG, num_envs=4, num_steps=8))


@pytest.mark.parametrize("which", ["squad", "selector", "learned bot"])
def test_batched_inits_never_batch_the_orthogonal_initializers_qr(which):
    # jaxlib 0.10 on CPU runs a batched QR on the thread pool that waits for it: two at once can
    # deadlock a 2-core machine forever. Every trainer's batch of runs loops its init; every QR stays 2-D.
    squad = lambda: make_trainer(PPOConfig(**SMALL), mesh=None)  # noqa: E731
    trainer = {"squad": squad, "selector": _selector_trainer, "learned bot": _bot_trainer}[which]()
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    init, _ = run_fns(trainer, batched=True)
    ranks = lapack_operand_ranks(jax.make_jaxpr(init)(keys).jaxpr)
    assert ranks  # the networks' orthogonal init is there to check
    assert set(ranks) == {2}
    # The check sees the batching it guards against: a vmapped init's QRs are 3-D.
    assert 3 in lapack_operand_ranks(jax.make_jaxpr(jax.vmap(trainer.init))(keys).jaxpr)
    if which == "squad":  # the one-program trainer and the checkpointing batch trainer too
        cfg = PPOConfig(**SMALL)
        train_ranks = lapack_operand_ranks(jax.make_jaxpr(make_train(cfg, mesh=None))(keys).jaxpr)
        batch = make_batch_trainer(plan_runs(cfg, seeds=range(4)))
        assert set(train_ranks) == set(lapack_operand_ranks(jax.make_jaxpr(batch.init)().jaxpr)) == {2}


def test_each_run_trains_with_its_own_hyper_parameters():
    runs = plan_runs(PPOConfig(**SMALL), seeds=[0], sweep={"lr": ["0", "3e-3"], "gamma": ["0.9"]})
    assert [r.name for r in runs] == ["lr=0,gamma=0.9/seed_0", "lr=3e-3,gamma=0.9/seed_0"]
    batch = make_batch_trainer(runs)
    state = jax.jit(batch.init)()
    np.testing.assert_allclose(state.hyper["lr"], [0.0, 3e-3])
    np.testing.assert_allclose(state.hyper["gamma"], [0.9, 0.9])
    start = state.train_state.params
    state, _ = jax.jit(batch.run_updates, static_argnums=1)(state, 2)
    assert max_diff(take(start, 0), take(state.train_state.params, 0)) == 0.0  # lr 0: not a bit moved
    assert max_diff(take(start, 1), take(state.train_state.params, 1)) > 1e-3
    # The same run alone, from its config: the batch's run 1 to float tolerance.
    alone = make_trainer(runs[1].config, mesh=None)
    s = jax.jit(alone.init)(training_key(0))  # where jaxarena-train starts seed 0
    s, _ = jax.jit(alone.run_updates, static_argnums=1)(s, 2)
    assert max_diff(take(state.train_state.params, 1), s.train_state.params) < 1e-4


def test_each_run_plays_its_own_arena_knobs_in_one_program():
    # A calibration sweep: the bot's HP and the NPCs' melee damage differ between runs of one program.
    sweep = parse_sweep(["arena.bot_hp=300,900", "arena.npc_melee_damage=0"])
    runs = plan_runs(PPOConfig(**SMALL, arena={"bot_speed": 4.5}), seeds=[1], sweep=sweep)
    assert [r.name for r in runs] == [f"arena.bot_hp={hp},arena.npc_melee_damage=0/seed_1" for hp in (300, 900)]
    assert dict(runs[-1].config.arena) == {"bot_hp": 900.0, "bot_speed": 4.5, "npc_melee_damage": 0.0}
    (group,) = group_runs(runs)
    batch = make_batch_trainer(group)
    state = jax.jit(batch.init)()
    bot_hp = state.env_state.env_state.bot_hp  # (runs, envs): every arena starts at its run's HP
    chex.assert_shape(bot_hp, (2, SMALL["num_envs"]))
    np.testing.assert_array_equal(bot_hp, np.repeat([[300.0], [900.0]], SMALL["num_envs"], 1))
    state, metrics = jax.jit(batch.run_updates, static_argnums=1)(state, 2)
    # No melee damage and no orbs in reach yet: the bot loses HP only to orbs, never to a melee strike.
    hp = np.asarray(state.env_state.env_state.bot_hp)
    assert np.all(hp[0] <= 300.0) and np.all(hp[1] <= 900.0) and np.all(hp[1] > 300.0)
    # The run alone, from its config, plays the same arena: the batch's run 1 to float tolerance.
    alone = make_trainer(runs[1].config, mesh=None)
    s = jax.jit(alone.init)(training_key(1))
    s, _ = jax.jit(alone.run_updates, static_argnums=1)(s, 2)
    np.testing.assert_allclose(take(state.env_state.env_state.bot_hp, 1), s.env_state.env_state.bot_hp, atol=1e-3)
    for not_a_knob in ("arena.dt=0.1", "bot_hp=300,600"):  # a knob is named with its prefix
        with pytest.raises(ValueError, match="arena.KNOB"):
            parse_sweep([not_a_knob])
    with pytest.raises(ValueError, match="finite number"):
        parse_sweep(["arena.bot_hp=300,lots"])
    with pytest.raises(ValueError, match="bot_hp must be > 0"):
        plan_runs(PPOConfig(**SMALL), seeds=[0], sweep={"arena.bot_hp": ["0"]})


def test_arena_knobs_round_trip_through_config_json_and_set():
    config = PPOConfig(arena={"npc_melee_damage": 5, "bot_hp": 600})
    assert config.arena == (("bot_hp", 600.0), ("npc_melee_damage", 5.0))
    stored = json.loads(config.to_json())
    assert stored["arena"] == {"bot_hp": 600.0, "npc_melee_damage": 5.0}
    assert PPOConfig.from_dict(stored) == config
    old = {k: v for k, v in stored.items() if k != "arena"}  # a run written before the field existed
    assert PPOConfig.from_dict(old).arena == ()
    assert parse_field("arena", '{"bot_hp": 600}') == {"bot_hp": 600.0}  # as config.json spells it
    with pytest.raises(ValueError, match="not arena knobs"):
        parse_field("arena", '{"dt": 0.1}')
    with pytest.raises(ValueError, match="JSON object of arena knobs"):
        parse_field("arena", "bot_hp=600")


def test_sweeps_group_by_program_and_refuse_bad_values():
    base = PPOConfig(**SMALL)
    runs = plan_runs(base, seeds=[3, 4], sweep=parse_sweep(["lr=1e-4,3e-4", "hidden=8,16"]))
    assert len(runs) == 8
    groups = group_runs(runs)
    assert [len(g) for g in groups] == [4, 4]  # hidden changes the program; lr and the seed do not
    assert {r.config.hidden for r in groups[0]} == {8} and {r.config.hidden for r in groups[1]} == {16}
    assert {r.config.seed for r in groups[0]} == {3, 4}
    with pytest.raises(ValueError, match="lr takes float"):
        parse_sweep(["lr=1e-4,abc"])
    with pytest.raises(ValueError, match="not KEY=V1,V2"):
        parse_sweep(["learning_rate=1e-4"])
    with pytest.raises(ValueError, match="distinct"):
        parse_sweep(["lr=1e-4,1e-4"])
    assert parse_sweep(['bots=["evasive"];["evasive","balanced"]'])["bots"] == ['["evasive"]', '["evasive","balanced"]']
    with pytest.raises(ValueError, match="hidden must be >= 1"):
        plan_runs(base, seeds=[0], sweep={"hidden": ["0"]})
    with pytest.raises(ValueError, match="split them with group_runs"):
        make_batch_trainer(runs)


def read_tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files under `folder`, read back record by record (TFRecord framing)."""
    from tensorboardX.proto import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tensorboard_logger_writes_every_scalar_against_env_steps_and_purges_on_resume(tmp_path):
    from jaxarena.algorithms.loggers import make_logger

    rows = [{"update": u, "env_steps": 100 * u, "entropy": 1.0 / u, "npc_win_rate": float("nan")} for u in (1, 2, 3)]
    logger = make_logger("tensorboard", tmp_path, name="run")
    logger.log(rows)
    logger.close()
    scalars = read_tensorboard_scalars(tmp_path / "tensorboard")
    assert scalars["entropy"] == [(100, 1.0), (200, 0.5), (300, pytest.approx(1 / 3))]
    assert "npc_win_rate" not in scalars and "update" not in scalars  # NaN (no episode ended) and bookkeeping
    # A run resumed at update 2 rewrites update 3 into a new event file that carries the purge marker
    # (TensorBoard drops the earlier file's steps past 200 when it reads them).
    logger = make_logger("tensorboard", tmp_path, name="run", start_env_steps=200)
    logger.log([{"update": 3, "env_steps": 300, "entropy": 0.25}])
    logger.close()
    entropy = read_tensorboard_scalars(tmp_path / "tensorboard")["entropy"]
    assert (300, 0.25) in entropy and entropy[:2] == [(100, 1.0), (200, 0.5)]


@pytest.mark.slow  # two chunked CLI runs of two seeds, a summary's held-out episodes, a resume: ~1 min on 2 cores
def test_train_command_many_seeds_logs_to_tensorboard_and_resumes(tmp_path, capsys):
    out = tmp_path / "runs"
    steps = 6 * 8 * 3
    argv = ["--total-steps", str(steps), "--out", str(out), "--seeds", "2", "--seed", "5"]
    assert main([*argv, "--log", "tensorboard", "--eval-episodes", "2", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "2 runs (2 seeds x 1 settings) in 1 program(s)" in printed
    for seed in (5, 6):
        run = out / f"seed_{seed}"
        assert has_checkpoint(run) and read_config(run).seed == seed
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["update"] for r in rows] == [1, 2, 3]
        scalars = read_tensorboard_scalars(run / "tensorboard")
        assert [step for step, _ in scalars["entropy"]] == [r["env_steps"] for r in rows]
        np.testing.assert_allclose([v for _, v in scalars["entropy"]], [r["entropy"] for r in rows], rtol=1e-6)
    summary = json.loads((out / "summary.json").read_text())
    assert [r["seed"] for r in summary["runs"]] == [5, 6]
    assert set(summary["settings"]["(base)"]) >= {"aggressive", "evasive", "balanced", "learned"}
    assert "| (base) | 2 |" in (out / "summary.md").read_text()
    # The seeds' squads differ, and each equals what its seed's config trains alone (checked above in-process).
    assert max_diff(load_params(out / "seed_5")[1], load_params(out / "seed_6")[1]) > 1e-3

    # A longer schedule resumes both runs at update 3; the TensorBoard curve continues without a doubled stretch.
    assert (
        main(
            [
                "--total-steps",
                str(6 * 8 * 5),
                "--out",
                str(out),
                "--seeds",
                "2",
                "--seed",
                "5",
                "--log",
                "tensorboard",
                "--eval-episodes",
                "0",
                *TINY,
            ]
        )
        == 0
    )
    assert "resumed 2 runs at update 3/5" in capsys.readouterr().out
    for seed in (5, 6):
        rows = [json.loads(line) for line in (out / f"seed_{seed}" / "metrics.jsonl").read_text().splitlines()]
        assert [r["update"] for r in rows] == [1, 2, 3, 4, 5]
        steps_logged = [s for s, _ in read_tensorboard_scalars(out / f"seed_{seed}" / "tensorboard")["entropy"]]
        assert sorted(set(steps_logged)) == [r["env_steps"] for r in rows]
    # Other seeds into a folder that holds some of these runs: refused, nothing deleted.
    assert main(["--out", str(out), "--seeds", "2", "--seed", "6", "--total-steps", str(steps), *TINY]) == 2
    assert "checkpoints of 1 of these 2 runs" in capsys.readouterr().err
    assert has_checkpoint(out / "seed_5")


def test_bad_set_values_fail_in_one_line_and_write_nothing(tmp_path, capsys):
    for bad, expect in (
        (["--set", "lr=abc"], "lr takes float, got 'abc'"),
        (["--set", "num_envs=2.5"], "num_envs takes int"),
        (["--set", "bots=evasive"], "bots takes a JSON list of strings"),
        (["--set", "activation=sigmoid"], "activation must be 'tanh' or 'relu'"),
        (["--sweep", "lr=1e-4,abc"], "lr takes float"),
        (["--seeds", "2", "--sweep", "hidden=8,0"], "hidden must be >= 1"),
        (["--init-from", str(tmp_path / "missing")], "no config.json there"),
        (["--seeds", "2", "--init-from", str(tmp_path / "missing")], "no config.json there"),
    ):
        out = tmp_path / "never"
        # one whole update of the default arenas (192 x 128), so only the bad value can be refused
        assert main(["--out", str(out), "--total-steps", "24576", *bad, "--no-progress", "--keep-xla-flags"]) == 2, bad
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expect in err and "Traceback" not in err, (bad, err)
        assert not out.exists(), bad


@pytest.mark.slow  # W&B starts a service process per run
def test_wandb_offline_writes_one_run_per_seed(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "runs"
    assert (
        main(
            ["--total-steps", "96", "--out", str(out), "--seeds", "2", "--log", "wandb", "--eval-episodes", "0", *TINY]
        )
        == 0
    )
    ids = {(out / f"seed_{s}" / "wandb_id.txt").read_text() for s in (0, 1)}
    assert len(ids) == 2
    for seed in (0, 1):
        offline = list((out / f"seed_{seed}" / "wandb").glob("offline-run-*"))
        assert len(offline) == 1 and list(offline[0].glob("*.wandb")), offline


SHARDED = textwrap.dedent(
    """
    import json, jax, numpy as np
    from jaxarena.algorithms import PPOConfig
    from jaxarena.algorithms.multi_run import make_batch_trainer, plan_runs
    assert jax.device_count() == 2
    cfg = PPOConfig(num_envs=6, num_steps=8, hidden=8, update_epochs=1, num_minibatches=2, total_timesteps=96)
    runs = plan_runs(cfg, seeds=[0, 1, 2, 3])
    out = {}
    params = {}
    for name, mesh in (("split", "auto"), ("one", None)):
        batch = make_batch_trainer(runs, mesh=mesh)
        state = batch.place(jax.jit(batch.init)())
        state, _ = jax.jit(batch.run_updates, static_argnums=1)(state, 2)
        out[name + "_devices"] = len(state.train_state.params["params"]["actor_out"]["kernel"].sharding.device_set)
        params[name] = state.train_state.params
    out["max_diff"] = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                          for a, b in zip(jax.tree.leaves(params["split"]), jax.tree.leaves(params["one"])))
    print("RESULT", json.dumps(out))
    """
)


@pytest.mark.slow  # a fresh JAX process with 2 forced host devices
def test_runs_split_over_devices_train_as_on_one():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert result["split_devices"] == 2 and result["one_devices"] == 1
    assert result["max_diff"] < 1e-4

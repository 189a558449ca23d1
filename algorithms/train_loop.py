"""The training command: chunks of jitted PPO updates, checkpoints, metrics, plots.

    python scripts/train.py --combination B --total-steps 2e7 --out runs/b
    jaxarena-train ...            (console script pointing at `main`)

Each chunk of `--chunk` updates is one call of the jitted `run_updates`;
after each chunk its metrics are appended to `metrics.csv`/`metrics.jsonl`
and, every `--checkpoint-every` chunks (default every chunk), the full
runner state is saved atomically. Re-running with the same `--out` resumes
from the latest checkpoint (metrics rows past it are dropped), so a Ctrl-C or
kill loses at most the unfinished chunk.

`--seeds N` trains N seeds in one compiled program (vmapped, split over devices
when there are several), each in its own folder under `--out`; `--sweep
KEY=V1,V2` adds a grid of settings (`jaxarena.algorithms.train_many`).
`--log tensorboard` or `--log wandb` sends every run's curves there as well.

With `--distributed` the same command runs on every process of a multi-process
(multi-host) run; see `jaxarena.algorithms.distributed` and docs/distributed.md.
Every process takes part in each chunk and each checkpoint; process 0 alone
writes the config, the metrics and the plot, and prints.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

from jaxarena import cli_errors
from jaxarena.cli_errors import ArgumentParser, UserError, cli_main, int_at_least, step_count
from jaxarena.config_files import read_fields
from jaxarena.files import check_folder, write_atomic
from jaxarena.key_streams import training_key
from jaxarena.names import BOT_TYPES
from jaxarena.registry import ARENA_IDS
from jaxarena.scenarios import SCENARIOS, training_standard

from . import distributed, driver
from .collapse import CollapseWatch
from .config import PRESETS, PPOConfig, default_preset, field_changes
from .loggers import LOGGERS, make_logger
from .train_metrics import MetricsLog, log_chunk, plot_curves
from .warm_start import warm_start_runner

YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type="


def parse_args(argv=None) -> argparse.Namespace:
    p = ArgumentParser(prog="jaxarena-train", description=__doc__.split("\n\n")[0])
    p.add_argument("--combination", choices=("A", "B"), default=None, help="A (default for a new run) or B")
    p.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default=None,
        help=(
            "PPO recipe (docs/training.md): default (a new A run's: 9 seeds of 10 end with a policy), "
            "classic (the zoo's squads', and a new B run's), fast or "
            "fast_evasive; options override it"
        ),
    )
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a new run's settings from a .json or .toml file (a run's config.json reproduces that run); "
        "options override it, --preset does not apply",
    )
    p.add_argument("--total-steps", type=step_count, default=None, help="env steps (arena ticks), e.g. 2e7")
    p.add_argument("--out", required=True, help="run directory (config, checkpoints, metrics, plot)")
    p.add_argument("--env", dest="env_id", choices=ARENA_IDS, default=None, help="arena variant (default Arena-v0)")
    p.add_argument("--scenario", choices=tuple(SCENARIOS), default=None, help="arena preset (default paper)")
    p.add_argument(
        "--bots", nargs="+", choices=BOT_TYPES, default=None, help="the bots the arenas fight, dealt in turn"
    )
    p.add_argument("--seed", type=int, default=None, help="training seed (with --seeds: the first of them; default 0)")
    p.add_argument(
        "--seeds",
        type=int_at_least(1),
        default=1,
        metavar="N",
        help="train N seeds (--seed, --seed + 1, ...) in one compiled program, each in OUT/seed_S",
    )
    p.add_argument(
        "--sweep",
        nargs="+",
        default=[],
        metavar="KEY=V1,V2",
        help="train every combination of these PPOConfig values or arena knobs (arena.bot_hp=300,600) (x --seeds), in "
        "OUT/KEY=V/seed_S; the float hyper-parameters (lr, ent_coef, gamma, ...) and the arena knobs share one "
        "program, others make one program per value",
    )
    p.add_argument("--num-envs", type=int, default=None, help="arenas stepped in lock-step")
    p.add_argument("--num-steps", type=int, default=None, help="ticks per arena between updates")
    p.add_argument("--lr", type=float, default=None, help="Adam's learning rate (annealed to 0 unless anneal_lr=false)")
    p.add_argument("--hidden", type=int, default=None, help="units per hidden layer")
    p.add_argument("--init-from", default=None, help="warm start a new run from this run's (or packaged A/B) params")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="any other PPOConfig field")
    p.add_argument(
        "--log",
        nargs="+",
        choices=LOGGERS,
        default=["jsonl"],
        help="where curves go besides metrics.jsonl/csv (always written): tensorboard (OUT/.../tensorboard) "
        'or wandb (WANDB_MODE=offline to keep it local); needs pip install -e ".[log]"',
    )
    p.add_argument("--wandb-project", default=None, help="W&B project (default $WANDB_PROJECT or jaxarena)")
    p.add_argument(
        "--eval-episodes",
        type=int_at_least(0),
        default=200,
        help="with --seeds or --sweep: held-out episodes per bot for each run's final win rates (0: none)",
    )
    p.add_argument(
        "--chunk", type=int_at_least(1), default=10, help="updates per jitted call (one metrics/progress step)"
    )
    p.add_argument("--checkpoint-every", type=int_at_least(1), default=1, help="save every N chunks")
    p.add_argument("--keep", type=int_at_least(0), default=2, help="checkpoints to keep (0: all)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="require a checkpoint in --out and continue it")
    g.add_argument("--fresh", action="store_true", help="delete --out's checkpoints and metrics, start over")
    p.add_argument("--keep-xla-flags", action="store_true", help=f"do not add {YNN_FLAG} to XLA_FLAGS")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (the log lines still print)")
    distributed.add_arguments(p)
    return p.parse_args(argv)


def _config_from_args(args, base: PPOConfig | None) -> PPOConfig:
    cfg = base if base is not None else PPOConfig(combination=args.combination or "A")
    if args.config is not None and args.preset is not None:
        raise UserError("--config and --preset both set a run's recipe: give one (options override either)")
    # A new run without --preset or --config starts from its combination's default preset; a resumed one
    # keeps its fields (a --config given on resume must agree with them, as any option must).
    preset = None if args.config else args.preset or (default_preset(args.combination or "A") if base is None else None)
    changes = read_fields(args.config, cfg.to_dict()) if args.config else dict(PRESETS[preset]) if preset else {}
    if args.combination is not None:
        changes["combination"] = args.combination
    if args.total_steps is not None:
        changes["total_timesteps"] = args.total_steps
    for name in ("env_id", "scenario", "seed", "num_envs", "num_steps", "lr", "hidden"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.bots is not None:
        changes["bots"] = list(args.bots)  # as the stored config spells it, so a resume compares equal
    if args.init_from is not None:
        changes["init_from"] = str(args.init_from)
    fields = cfg.to_dict()
    try:
        changes.update(field_changes(args.set, fields))
    except KeyError as error:
        key, sep, _ = error.args[0].partition("=")
        problem = f"unknown PPOConfig field {key!r}" if sep else f"{key!r} is not KEY=VALUE"
        raise UserError(f"--set: {problem}; fields: {sorted(fields)}") from None
    except ValueError as error:
        raise UserError(f"--set {error}") from None
    if base is not None:
        fixed = {k for k in changes if k not in ("total_timesteps",) and changes[k] != fields[k]}
        if fixed:
            raise UserError(f"resuming: cannot change {sorted(fixed)} of an existing run (use --fresh or a new --out)")
    cfg = cfg.replace(**changes)  # a bad value raises ValueError: a one-line user error
    if args.total_steps is not None and args.total_steps < cfg.steps_per_update:  # a run trains whole updates
        raise UserError(
            f"--total-steps {args.total_steps} is less than one update ({cfg.steps_per_update} env steps: --num-envs "
            f"{cfg.num_envs} x --num-steps {cfg.num_steps}): give --total-steps {cfg.steps_per_update} or more, "
            "or lower --num-envs or --num-steps"
        )
    return cfg


@cli_main("jaxarena-train")
def main(argv=None) -> int:
    args = parse_args(argv)
    check_folder(args.out, "--out")  # before anything runs: a file in the way would fail the first write
    # Set before JAX creates its CPU backend (importing jax does not). Measured
    # in benchmarks/train_throughput.py: YNNPACK fusions slow this workload.
    if not args.keep_xla_flags and YNN_FLAG not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + YNN_FLAG).strip()
    # Before anything else touches JAX: the backends are built once, for all processes' devices.
    if args.distributed:
        distributed.initialize(args)
    else:
        distributed.check_arguments(args)  # --process-id and the like without --distributed

    import jax

    from .checkpoint import Checkpointer
    from .ppo import make_trainer

    if args.seeds > 1 or args.sweep:
        return _main_many(args)
    run_dir = Path(args.out)
    config, existing = _open_run(args, run_dir)
    trainer = make_trainer(config, distributed.global_mesh(config.num_envs) if args.distributed else "auto")
    primary = distributed.is_primary()
    t0 = time.time()
    runner = jax.jit(trainer.init)(training_key(config.seed))
    if existing:
        ckpt = Checkpointer(run_dir, config, max_to_keep=args.keep or None)
        runner = driver.restore([ckpt], runner, False, "its policy still loads (load_policy); --fresh starts it over")
        _say(f"resumed {run_dir} at update {int(runner.update)}/{config.num_updates}")
    else:
        if config.init_from:
            runner = warm_start_runner(config, runner, trainer.mesh if args.distributed else None)
            _say(f"warm start from {config.init_from} (optimiser state fresh)")
        # Only now, with the start known to work, does the run's folder get its config.
        ckpt = Checkpointer(run_dir, config, max_to_keep=args.keep or None)
    log = MetricsLog(run_dir, int(runner.update), write=primary)
    loggers = [
        make_logger(
            kind,
            run_dir,
            name=run_dir.name,
            config=config.to_dict(),
            start_env_steps=int(runner.update) * config.steps_per_update,
            project=args.wandb_project,
        )
        for kind in (args.log if primary else [])
    ]
    devices = jax.devices()
    _say(
        f"combination {config.combination}, scenario {config.scenario}, bots {', '.join(config.bots)}, "
        f"{config.num_updates} updates x {config.steps_per_update} env steps, "
        f"{config.num_envs} envs on {len(devices)} {devices[0].platform} device(s)"
        + (f" of {jax.process_count()} processes" if args.distributed else "")
        + (" (sharded)" if trainer.mesh is not None else "")
    )
    try:
        runner, interrupted = _train(args, config, trainer.run_updates, runner, ckpt, log, run_dir, t0, loggers)
    finally:
        for logger in loggers:
            logger.close()
    _print_outputs(config, runner, interrupted, ckpt, log, run_dir, t0)
    return cli_errors.INTERRUPTED_EXIT if interrupted else 0


def _main_many(args) -> int:
    """`--seeds N` / `--sweep`: the checks a single run makes, then `train_many`."""
    from .multi_run import parse_sweep
    from .train_many import train_many

    if args.distributed:
        raise UserError("--seeds and --sweep run on one process (several devices split the runs); drop --distributed")
    config = _config_from_args(args, None)
    try:
        sweep = parse_sweep(args.sweep)
    except ValueError as error:
        raise UserError(str(error)) from None
    if "seed" in sweep:
        raise UserError("--sweep seed=...: use --seed S --seeds N for seeds")
    return train_many(args, config, sweep, warm_start_runner)


def _say(text: str) -> None:
    """Print a line of the run's progress: on process 0 only, so a multi-process run prints each line once."""
    if distributed.is_primary():
        print(text, flush=True)


def _open_run(args, run_dir: Path) -> tuple[PPOConfig, bool]:
    """The run's config, and whether it resumes a checkpoint. The config is checked first; only then does
    `--fresh` clear what `--out` holds, so a mistyped option deletes nothing."""
    from .checkpoint import clear_run, has_checkpoint, read_config

    existing = has_checkpoint(run_dir)
    if args.resume and not existing:
        raise UserError(f"--resume: no checkpoint in {run_dir}")
    resumes = existing and not args.fresh
    config = _config_from_args(args, read_config(run_dir) if resumes else None)
    if args.fresh and run_dir.exists():
        distributed.barrier("looked for a checkpoint")  # nobody deletes while another process reads
        if distributed.is_primary():
            clear_run(run_dir)
    distributed.barrier("opened the run")  # nobody writes before every process has read
    return config, resumes


def _train(args, config: PPOConfig, update, runner, ckpt, log: MetricsLog, run_dir: Path, t0: float, loggers=()):
    """Runs chunks (`driver.chunks`) until the last update or a Ctrl-C/SIGTERM; returns (runner, interrupted)."""
    from tqdm.auto import tqdm

    start = int(runner.update)
    # SIGTERM behaves like Ctrl-C: finish nothing new, keep what is saved.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    bar = tqdm(
        total=config.num_updates * config.steps_per_update,
        initial=start * config.steps_per_update,
        unit="step",
        unit_scale=True,
        disable=args.no_progress or not distributed.is_primary(),
        dynamic_ncols=True,
    )
    chunks = 0
    interrupted = False
    watch = CollapseWatch(training_standard(config.scenario), config.bots)
    if (message := watch.update(log.rows)) and distributed.is_primary():  # a resumed run: its verdict so far
        bar.write(message)
    steps = driver.chunks(
        update,
        runner,
        config.num_updates,
        chunk=args.chunk,
        checkpointers=[ckpt],
        checkpoint_every=args.checkpoint_every,
        fetch=distributed.host,  # every process: a collective where the run spans several
        say=_say,
    )
    try:
        for state, metrics, n, elapsed in steps:
            runner = state  # the newest state: what the run ends with
            rows = log_chunk(metrics, n, t0, log, loggers)
            chunks += 1
            if (message := watch.update(rows)) and distributed.is_primary():
                bar.write(message)
            postfix = _progress_postfix(rows, n, elapsed, config)
            if watch.flag is not None:
                postfix["collapsing"] = watch.flag
            bar.set_postfix(postfix, refresh=False)
            bar.update(n * config.steps_per_update)
            if chunks % 10 == 0 and distributed.is_primary():
                plot_curves(log.rows, run_dir / "learning_curve.png", f"Combination {config.combination}")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
    if distributed.is_primary():  # the collapse verdict, also for an interrupted run: how it stood
        summary = {"scenario": config.scenario, "collapse": watch.status()}
        write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if interrupted:
        cli_errors.interrupted("jaxarena-train", _resume_hint(args, ckpt))
    return runner, interrupted


def _resume_hint(args, ckpt) -> str:
    """What a Ctrl-C leaves, and how to go on: `--fresh` again would delete the checkpoints it names."""
    if ckpt.latest_step() is None:
        return "no checkpoint was saved yet; run the command again to start over"
    again = "run the command again without --fresh to resume" if args.fresh else cli_errors.RESUME_HINT
    return f"the unfinished chunk is lost, saved checkpoints are intact; {again}"


def _progress_postfix(rows: list[dict], n: int, elapsed: float, config: PPOConfig) -> dict:
    """The progress bar's numbers for a chunk: steps/s, mean return, NPC win rate per bot."""
    eps = {b: sum(r[f"episodes_per_bot_{b}"] for r in rows) for b in BOT_TYPES}
    wins = {b: sum(r[f"npc_wins_per_bot_{b}"] for r in rows) for b in BOT_TYPES}
    rets = [r["return_mean"] for r in rows if not math.isnan(r["return_mean"])]
    post = {"sps": f"{n * config.steps_per_update / elapsed:,.0f}"}
    post["ret"] = f"{np.mean(rets):.3f}" if rets else "-"
    for b in config.bots:
        post[f"win_{b[:3]}"] = f"{wins[b] / eps[b]:.2f}" if eps[b] else "-"
    return post


def _print_outputs(config: PPOConfig, runner, interrupted: bool, ckpt, log: MetricsLog, run_dir: Path, t0: float):
    """Plots the curve, closes the checkpointer and prints where everything the run wrote lies (process 0)."""
    step = ckpt.latest_step()
    ckpt.close()
    if not distributed.is_primary():
        return
    plot = plot_curves(log.rows, run_dir / "learning_curve.png", f"Combination {config.combination}")
    print(
        f"wall time {time.time() - t0:.1f} s; "
        f"updates {int(runner.update) if not interrupted else step}/{config.num_updates}"
    )
    print(f"config:      {run_dir / 'config.json'}")
    print(f"checkpoint:  {run_dir / 'checkpoints' / str(step)} (latest)")
    print(f"metrics:     {log.csv_path}, {log.jsonl_path}")
    if plot:
        print(f"curve:       {plot}")
    print(f'use it:      policy, params = jaxarena.algorithms.checkpoint.load_policy("{run_dir}")')


if __name__ == "__main__":
    sys.exit(main())

"""`jaxarena-train --seeds N` and `--sweep`: many runs in one compiled program, each in its own folder.

    jaxarena-train --seeds 8 --out runs/a                          # runs/a/seed_0 ... runs/a/seed_7
    jaxarena-train --seeds 4 --sweep lr=1e-4,3e-4 --out runs/lr    # runs/lr/lr=1e-4/seed_0 ...

Each run's folder is a run folder as `jaxarena-train` writes for one seed (config.json with its
seed and setting, checkpoints, metrics.jsonl/csv, the learning curve, and the `--log` loggers'
files), so `load_policy("runs/a/seed_3")` and every other tool take it as it is. Runs that share
a program (`multi_run.group_runs`) step together in one vmapped chunk; their checkpoints are
written after the same chunks, so a Ctrl-C or a kill loses at most the unfinished chunk, and the
same command resumes every run from the newest update all of them saved. At the end each run is
played on held-out episodes against every bot (`--eval-episodes`), and `summary.md` /
`summary.json` in `--out` give the win rates per setting: mean, range over seeds, and how many
seeds cleared the bars.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from jaxarena import cli_errors
from jaxarena.cli_errors import UserError
from jaxarena.files import write_atomic
from jaxarena.names import BOT_TYPES
from jaxarena.scenarios import training_standard

from . import driver
from .collapse import CollapseWatch
from .config import PPOConfig
from .driver import stack, take, updates_done
from .loggers import make_logger
from .multi_run import Run, group_runs, make_batch_trainer
from .train_metrics import MetricsLog, log_chunk, plot_curves

SUMMARY_FILES = ("summary.md", "summary.json")
#: The held-out episodes' root key: no training run's stream starts from it (training keys fold
#: `key_streams.PPO_STREAM` into the seed). 2_000_003 served while the default recipe was tuned, so
#: the figures a recipe is reported with come from this one, which no tuning has seen.
EVAL_KEY = 3_100_019


@dataclass
class RunFiles:
    """One run's folder and what writes into it."""

    run: Run
    path: Path
    ckpt: object = None
    log: MetricsLog | None = None
    loggers: list = field(default_factory=list)
    watch: CollapseWatch | None = None


def plan(args, base: PPOConfig, sweep: dict[str, list[str]]) -> list[Run]:
    """The runs of `--seeds N` (from `--seed`, default 0) over the sweep's grid; a UserError for a bad setting."""
    from .multi_run import plan_runs

    first = base.seed
    try:
        return plan_runs(base, range(first, first + args.seeds), sweep)
    except ValueError as exc:
        raise UserError(f"--sweep: {exc}") from None


def open_runs(args, out: Path, runs: list[Run]) -> bool:
    """Checks `--out` against the planned runs before anything is written; returns whether they resume.

    Every run resumes or none does: a folder where only some runs have checkpoints (an earlier run with
    other seeds or settings) is refused, as is a resumed run whose stored config differs.
    """
    from .checkpoint import clear_run, has_checkpoint, read_config

    if args.fresh and out.exists():
        for run in runs:
            clear_run(out / run.name)
        for name in SUMMARY_FILES:
            (out / name).unlink(missing_ok=True)
    have = [has_checkpoint(out / r.name) for r in runs]
    if args.resume and not all(have):
        raise UserError(f"--resume: no checkpoint for {[r.name for r, h in zip(runs, have, strict=True) if not h]}")
    if any(have) and not all(have):
        raise UserError(
            f"{out} holds checkpoints of {sum(have)} of these {len(runs)} runs: "
            "use the command that made them to resume, --fresh to start over, or a new --out"
        )
    if all(have):
        for run in runs:
            stored = read_config(out / run.name).to_dict()
            wanted = run.config.to_dict()
            changed = sorted(k for k in wanted if k != "total_timesteps" and stored.get(k) != wanted[k])
            if changed:
                raise UserError(
                    f"resuming {out / run.name}: cannot change {changed} of an existing run "
                    "(name the --preset it was made with, or use --fresh or a new --out)"
                )
    return all(have)


def train_many(args, base: PPOConfig, sweep: dict[str, list[str]], warm_start) -> int:
    """Trains every run of the plan, batch by batch; returns the exit status."""
    import jax

    from .checkpoint import Checkpointer

    out = Path(args.out)
    runs = plan(args, base, sweep)
    resume = open_runs(args, out, runs)
    groups = group_runs(runs)
    total_steps = sum(r.config.num_updates * r.config.steps_per_update for r in runs)
    bar = _progress_bar(args, total_steps)
    t0 = time.time()
    done_files: list[RunFiles] = []
    print(
        f"{len(runs)} runs ({args.seeds} seeds x {len(runs) // args.seeds} settings) in {len(groups)} program(s) "
        f"on {len(jax.devices())} {jax.devices()[0].platform} device(s); folders under {out}",
        flush=True,
    )
    interrupted = False
    try:
        for group in groups:
            batch = make_batch_trainer(group)
            config = group[0].config
            files = [RunFiles(run, out / run.name) for run in group]
            runner = jax.jit(batch.init)()
            if resume:
                readers = [Checkpointer(f.path, f.run.config, max_to_keep=None, save_config=False) for f in files]
                try:
                    runner = driver.restore(readers, runner, batched=True)
                finally:
                    for reader in readers:
                        reader.close()
                print(f"resumed {len(files)} runs at update {updates_done(runner)}/{config.num_updates}", flush=True)
            elif config.init_from:
                runner = stack([warm_start(config, take(runner, i)) for i in range(len(group))])
            for f in files:  # only now, with the start known to work, is anything written
                f.path.mkdir(parents=True, exist_ok=True)
                f.ckpt = Checkpointer(f.path, f.run.config, max_to_keep=args.keep or None)
                start = updates_done(runner)
                f.log = MetricsLog(f.path, start)
                f.watch = CollapseWatch(training_standard(config.scenario), config.bots)
                if message := f.watch.update(f.log.rows):  # a resumed run: its verdict so far
                    bar.write(f"{f.run.name}: {message}")
                f.loggers = [_logger(args, kind, f, start * config.steps_per_update) for kind in args.log]
            bar.update(updates_done(runner) * config.steps_per_update * len(group))
            runner = batch.place(runner)
            try:
                _train_group(args, batch, runner, files, bar, t0)
            finally:
                for f in files:
                    for logger in f.loggers:
                        logger.close()
            done_files += files
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
        for f in done_files:
            if f.ckpt is not None:
                f.ckpt.close()
    if interrupted:
        cli_errors.interrupted("jaxarena-train", f"the unfinished chunk is lost; {cli_errors.RESUME_HINT}")
        return cli_errors.INTERRUPTED_EXIT
    table = summarise(args, runs, out)
    print(f"wall time {time.time() - t0:.1f} s")
    print(table)
    print(f"summary:     {out / 'summary.md'}, {out / 'summary.json'}")
    print(f'use a run:   policy, params = jaxarena.algorithms.checkpoint.load_policy("{out / runs[0].name}")')
    return 0


def _logger(args, kind: str, f: RunFiles, start_env_steps: int):
    group = f.run.setting_name or Path(args.out).name
    return make_logger(
        kind,
        f.path,
        name=f"{Path(args.out).name}/{f.run.name}",
        group=group,
        config=f.run.config.to_dict(),
        start_env_steps=start_env_steps,
        project=args.wandb_project,
    )


def _progress_bar(args, total_steps: int):
    from tqdm.auto import tqdm

    return tqdm(total=total_steps, unit="step", unit_scale=True, disable=args.no_progress, dynamic_ncols=True)


def _train_group(args, batch, runner, files: list[RunFiles], bar, t0: float):
    """Chunks of vmapped updates (`driver.chunks`) until the group's last update; logs every run after each."""
    config = batch.runs[0].config
    steps = driver.chunks(
        batch.run_updates,
        runner,
        config.num_updates,
        chunk=args.chunk,
        checkpointers=[f.ckpt for f in files],
        batched=True,
        checkpoint_every=args.checkpoint_every,
        say=lambda text: print(text, flush=True),
        label=f" of {len(files)} runs",
    )
    for chunks, (_state, metrics, n, elapsed) in enumerate(steps, start=1):
        wins = {b: [] for b in config.bots}
        for i, f in enumerate(files):
            rows = log_chunk(take(metrics, i), n, t0, f.log, f.loggers)
            for b in config.bots:
                eps = sum(r[f"episodes_per_bot_{b}"] for r in rows)
                if eps:
                    wins[b].append(sum(r[f"npc_wins_per_bot_{b}"] for r in rows) / eps)
            if chunks % 10 == 0:
                plot_curves(f.log.rows, f.path / "learning_curve.png", f"{f.run.name}")
            if message := f.watch.update(rows):
                bar.write(f"{f.run.name}: {message}")
        post = {"sps": f"{n * config.steps_per_update * len(files) / elapsed:,.0f}"}
        post.update({f"win_{b[:3]}": f"{np.mean(w):.2f}" for b, w in wins.items() if w})
        collapsing = sum(f.watch.flag is not None for f in files)
        if collapsing:
            post["collapsing"] = f"{collapsing}/{len(files)}"
        bar.set_postfix(post, refresh=False)
        bar.update(n * config.steps_per_update * len(files))
    for f in files:
        plot_curves(f.log.rows, f.path / "learning_curve.png", f"{f.run.name}")


def summarise(args, runs: list[Run], out: Path) -> str:
    """Plays every run's final policy on held-out episodes and writes summary.md/json; returns the table.

    A run has `learned` when its win rates reach its scenario's bars (`jaxarena.scenarios.TrainingStandard`;
    None where the scenario declares none), and `collapse` gives the collapse checks' verdict on its
    training metrics (`CollapseWatch`), so a seed that failed is named, with why, not only counted.
    """
    from .checkpoint import load_params
    from .evaluation import win_rates

    results = []
    for run in runs:
        standard = training_standard(run.config.scenario)
        row = {"run": run.name, "setting": run.setting_name, "seed": run.config.seed}
        if args.eval_episodes:
            config, params = load_params(out / run.name)
            row.update(win_rates(config, params, args.eval_episodes, EVAL_KEY))
            row["learned"] = None if standard.bars is None else all(row[b] >= v for b, v in standard.bars.items())
        row["collapse"] = _collapse_status(out / run.name, run.config, standard)
        results.append(row)
    bars = training_standard(runs[0].config.scenario).bars
    settings = list(dict.fromkeys(r["setting"] for r in results))
    lines = [
        f"Held-out NPC win rate of each run's final policy, {args.eval_episodes} episodes per bot "
        f"(the same episodes for every run); "
        + (
            "learned: >= " + " / ".join(f"{bars[b]:.0%}" for b in BOT_TYPES) + " against the aggressive / evasive / "
            f"balanced bot (the {runs[0].config.scenario} scenario's bars)."
            if bars
            else f"the {runs[0].config.scenario} scenario declares no bars, so learned is not judged."
        ),
        "",
        "| setting | seeds | "
        + " | ".join(f"vs {b}: mean [min, max]" for b in BOT_TYPES)
        + " | learned | collapsing |",
        "|---|---|" + "---|" * len(BOT_TYPES) + "---|---|",
    ]
    if not args.eval_episodes:
        lines = ["No held-out evaluation (--eval-episodes 0): see each run's metrics.jsonl.", ""]
    by_setting = {}
    for setting in settings:
        rows = [r for r in results if r["setting"] == setting]
        entry = {"seeds": [r["seed"] for r in rows]}
        entry["collapsing"] = [r["seed"] for r in rows if r["collapse"]["collapsing"]]
        if args.eval_episodes:
            cells = []
            for b in BOT_TYPES:
                v = np.array([r[b] for r in rows])
                entry[b] = {"mean": round(float(v.mean()), 4), "min": float(v.min()), "max": float(v.max())}
                cells.append(f"{100 * v.mean():.1f} [{100 * v.min():.1f}, {100 * v.max():.1f}]")
            judged = [r["learned"] for r in rows if r["learned"] is not None]
            entry["learned"] = f"{sum(judged)}/{len(rows)}" if judged else "not judged"
            entry["learned_count"] = sum(judged) if judged else None
            entry["not_learned"] = [r["seed"] for r in rows if r["learned"] is False]
            lines.append(
                f"| {setting or '(base)'} | {len(rows)} | " + " | ".join(cells) + f" | {entry['learned']} | "
                f"{len(entry['collapsing'])}/{len(rows)} |"
            )
        by_setting[setting or "(base)"] = entry
    lines += _failures(results, args.eval_episodes)
    table = "\n".join(lines)
    write_atomic(out / "summary.md", table + "\n")
    standards = {r.config.scenario: training_standard(r.config.scenario) for r in runs}
    summary = {
        "eval_episodes": args.eval_episodes,
        "eval_key": EVAL_KEY,
        "bars": {name: dict(s.bars) if s.bars else None for name, s in standards.items()},
        "settings": by_setting,
        "runs": results,
    }
    write_atomic(out / "summary.json", json.dumps(summary, indent=2, default=_json_default) + "\n")
    return table


def _collapse_status(run_dir: Path, config: PPOConfig, standard) -> dict:
    """The collapse checks' verdict on a run's whole training record (its metrics.jsonl)."""
    watch = CollapseWatch(standard, config.bots)
    path = run_dir / "metrics.jsonl"
    if path.exists():
        watch.update([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
    return watch.status()


def _failures(results: list[dict], evaluated: int) -> list[str]:
    """One line per run that did not learn or was collapsing when it ended: which, and why."""
    lines = []
    for r in results:
        collapse = r["collapse"]
        if r.get("learned") is not False and not collapse["collapsing"]:
            continue
        rates = " / ".join(f"{100 * r[b]:.1f}" for b in BOT_TYPES) + "%" if evaluated else "not evaluated"
        since = next((e["env_steps"] for e in reversed(collapse["events"]) if e["flag"]), None)
        why = f"collapsing ({collapse['flag']}) since {since / 1e6:.1f}M env steps" if collapse["collapsing"] else ""
        verdict = {True: "learned", False: "did not learn"}.get(r.get("learned"), "not judged")
        lines.append(f"- {r['run']}: {verdict} ({rates}){'; ' + why if why else ''}")
    return ["", "Runs to look at:", *lines] if lines else []


def _json_default(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, float) and math.isnan(x):
        return None
    raise TypeError(type(x))

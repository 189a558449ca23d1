"""The training command: chunks of jitted PPO updates, checkpoints, metrics, plots.

    python scripts/train.py --combination B --total-steps 2e7 --out runs/b
    jaxarena-train ...            (console script pointing at `main`)

Each chunk of `--chunk` updates is one call of the jitted `run_updates`;
after each chunk its metrics are appended to `metrics.csv`/`metrics.jsonl`
and, every `--checkpoint-every` chunks (default every chunk), the full
runner state is saved atomically. Re-running with the same `--out` resumes
from the latest checkpoint (metrics rows past it are dropped), so a Ctrl-C or
kill loses at most the unfinished chunk.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np

from jaxarena.cli_errors import ArgumentParser, UserError, cli_main
from jaxarena.registry import ARENA_IDS
from jaxarena.scenarios import SCENARIOS
from jaxarena.types import BOT_TYPES

from .config import PPOConfig

YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type="


def parse_args(argv=None) -> argparse.Namespace:
    p = ArgumentParser(prog="jaxarena-train", description=__doc__.split("\n\n")[0])
    p.add_argument("--combination", choices=("A", "B"), default=None, help="A (default for a new run) or B")
    p.add_argument("--total-steps", type=float, default=None, help="env steps (arena ticks), e.g. 2e7")
    p.add_argument("--out", required=True, help="run directory (config, checkpoints, metrics, plot)")
    p.add_argument("--env", dest="env_id", choices=ARENA_IDS, default=None, help="arena variant (default Arena-v0)")
    p.add_argument("--scenario", choices=tuple(SCENARIOS), default=None, help="arena preset (default paper)")
    p.add_argument("--bots", nargs="+", choices=BOT_TYPES, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--num-envs", type=int, default=None)
    p.add_argument("--num-steps", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--hidden", type=int, default=None)
    p.add_argument("--init-from", default=None, help="warm start a new run from this run's (or packaged A/B) params")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="any other PPOConfig field")
    p.add_argument("--chunk", type=int, default=10, help="updates per jitted call (one metrics/progress step)")
    p.add_argument("--checkpoint-every", type=int, default=1, help="save every N chunks")
    p.add_argument("--keep", type=int, default=2, help="checkpoints to keep (0: all)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="require a checkpoint in --out and continue it")
    g.add_argument("--fresh", action="store_true", help="delete --out's checkpoints and metrics, start over")
    p.add_argument("--keep-xla-flags", action="store_true", help=f"do not add {YNN_FLAG} to XLA_FLAGS")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def _config_from_args(args, base: PPOConfig | None) -> PPOConfig:
    cfg = base if base is not None else PPOConfig(combination=args.combination or "A")
    changes = {}
    if args.combination is not None:
        changes["combination"] = args.combination
    if args.total_steps is not None:
        changes["total_timesteps"] = int(args.total_steps)
    for name in ("env_id", "scenario", "seed", "num_envs", "num_steps", "lr", "hidden"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.bots is not None:
        changes["bots"] = tuple(args.bots)
    if args.init_from is not None:
        changes["init_from"] = str(args.init_from)
    fields = cfg.to_dict()
    for item in args.set:
        key, _, raw = item.partition("=")
        if key not in fields:
            raise UserError(f"--set: unknown PPOConfig field {key!r}; fields: {sorted(fields)}")
        try:
            changes[key] = json.loads(raw)  # numbers, true/false, lists
        except json.JSONDecodeError:
            changes[key] = raw  # plain strings, e.g. activation=relu
    if base is not None:
        fixed = {k for k in changes if k not in ("total_timesteps",) and changes[k] != fields[k]}
        if fixed:
            raise UserError(f"resuming: cannot change {sorted(fixed)} of an existing run (use --fresh or a new --out)")
    return cfg.replace(**changes)


def _host_metrics(metrics: dict, i: int) -> dict:
    row = {}
    for key, value in metrics.items():
        v = np.asarray(value[i])
        if v.ndim == 0:
            row[key] = v.item()
        else:  # per-bot counts
            for j, name in enumerate(BOT_TYPES):
                row[f"{key}_{name}"] = int(v[j])
    for name in BOT_TYPES:
        n = row[f"episodes_per_bot_{name}"]
        row[f"npc_win_rate_{name}"] = row[f"npc_wins_per_bot_{name}"] / n if n else float("nan")
    row["update"] = int(row["update"])
    row["env_steps"] = int(row["env_steps"])
    return row


class MetricsLog:
    """Append-only metrics.csv + metrics.jsonl; truncated to the restored update on resume."""

    def __init__(self, run_dir: Path, upto_update: int):
        self.csv_path, self.jsonl_path = run_dir / "metrics.csv", run_dir / "metrics.jsonl"
        self.rows: list[dict] = []
        if self.jsonl_path.exists():
            for line in self.jsonl_path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    if row["update"] <= upto_update:
                        self.rows.append(row)
        self._rewrite()

    def _rewrite(self):
        with open(self.jsonl_path, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in self.rows)
        with open(self.csv_path, "w", newline="") as f:
            if self.rows:
                w = csv.DictWriter(f, fieldnames=list(self.rows[0]))
                w.writeheader()
                w.writerows(self.rows)

    def append(self, rows: list[dict]):
        new_file = not self.rows
        self.rows.extend(rows)
        with open(self.jsonl_path, "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
            f.flush()
            os.fsync(f.fileno())
        with open(self.csv_path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(self.rows[0]))
            if new_file:
                w.writeheader()
            w.writerows(rows)


def plot_curves(rows: list[dict], path: Path, title: str = "") -> Path | None:
    """Learning curves: episode return, NPC win rate per bot, entropy, vs env steps."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.array([r["env_steps"] for r in rows]) / 1e6

    def smooth(y, k=5):
        y = np.asarray(y, float)
        out = np.empty_like(y)
        for i in range(len(y)):
            w = y[max(0, i - k + 1) : i + 1]
            w = w[~np.isnan(w)]
            out[i] = w.mean() if len(w) else np.nan
        return out

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    axes[0].plot(x, smooth([r["return_mean"] for r in rows]))
    axes[0].set_ylabel("mean episode return (per NPC)")
    for name in BOT_TYPES:
        if any(r[f"episodes_per_bot_{name}"] for r in rows):
            axes[1].plot(x, smooth([r[f"npc_win_rate_{name}"] for r in rows]), label=name)
    axes[1].set_ylabel("NPC win rate")
    axes[1].set_ylim(-0.02, 1.02)
    if axes[1].lines:
        axes[1].legend()
    axes[2].plot(x, [r["entropy"] for r in rows])
    axes[2].set_ylabel("policy entropy (nats)")
    for ax in axes:
        ax.set_xlabel("env steps (millions)")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@cli_main("jaxarena-train")
def main(argv=None) -> int:
    args = parse_args(argv)
    # Set before JAX creates its CPU backend (importing jax does not). Measured
    # in benchmarks/train_throughput.py: YNNPACK fusions slow this workload.
    if not args.keep_xla_flags and YNN_FLAG not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + YNN_FLAG).strip()

    import jax
    from tqdm.auto import tqdm

    from .checkpoint import Checkpointer, has_checkpoint, read_config
    from .ppo import make_trainer

    run_dir = Path(args.out)
    existing = has_checkpoint(run_dir)
    if args.resume and not existing:
        raise UserError(f"--resume: no checkpoint in {run_dir}")
    if args.fresh and run_dir.exists():
        for name in ("checkpoints", "metrics.csv", "metrics.jsonl", "config.json", "learning_curve.png"):
            target = run_dir / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
        existing = False
    config = _config_from_args(args, read_config(run_dir) if existing else None)

    trainer = make_trainer(config)
    ckpt = Checkpointer(run_dir, config, max_to_keep=args.keep or None)
    run = jax.jit(trainer.run_updates, static_argnums=1, donate_argnums=0)
    t0 = time.time()
    runner = jax.jit(trainer.init)(jax.random.PRNGKey(config.seed))
    if config.init_from and not existing:
        from .checkpoint import load_params, obs_size_of
        from .warm_start import as_experts, forget_tag_input, input_rows, keep_fresh_experts, widen_params

        src_config, src_params = load_params(config.init_from)
        src_net, dst_net = src_config.network_kwargs(), config.network_kwargs()
        if (src_net["hidden"], src_net["activation"]) != (dst_net["hidden"], dst_net["activation"]) or (
            src_net.get("tag_experts") and not dst_net.get("tag_experts")
        ):
            raise UserError(f"--init-from {config.init_from}: network {src_net} differs from this run's {dst_net}")
        try:
            rows = input_rows(
                obs_size_of(src_config),
                src_net["tag_one_hot"],
                obs_size_of(config),
                dst_net["tag_one_hot"],
            )
            if src_config.combination == "A":
                src_params = forget_tag_input(src_params)
            if dst_net.get("tag_experts") and not src_net.get("tag_experts"):
                src_params = as_experts(src_params)
            params = widen_params(src_params, runner.train_state.params, rows)
            params = keep_fresh_experts(params, runner.train_state.params, config.fresh_tags)
        except ValueError as exc:
            raise UserError(
                f"--init-from {config.init_from} ({src_config.env_id}, {src_net}) cannot seed this run "
                f"({config.env_id}, {dst_net}): {exc}"
            ) from None
        runner = runner.replace(train_state=runner.train_state.replace(params=params))
        print(f"warm start from {config.init_from} (optimiser state fresh)", flush=True)
    if existing:
        try:
            runner = ckpt.restore(runner)
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(
                f"cannot resume {run_dir}: its checkpoint does not match this version's runner state "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}). "
                "Checkpoints written before jaxarena kept episode returns in a LogWrapper cannot be resumed; "
                "their policies still load (load_policy), and --fresh starts the run over."
            ) from None
        print(f"resumed {run_dir} at update {int(runner.update)}/{config.num_updates}", flush=True)
    start = int(runner.update)
    log = MetricsLog(run_dir, start)
    devices = jax.devices()
    print(
        f"combination {config.combination}, scenario {config.scenario}, bots {', '.join(config.bots)}, "
        f"{config.num_updates} updates x {config.steps_per_update} env steps, "
        f"{config.num_envs} envs on {len(devices)} {devices[0].platform} device(s)"
        + (" (sharded)" if trainer.mesh is not None else ""),
        flush=True,
    )

    # SIGTERM behaves like Ctrl-C: finish nothing new, keep what is saved.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    bar = tqdm(
        total=config.num_updates * config.steps_per_update,
        initial=start * config.steps_per_update,
        unit="step",
        unit_scale=True,
        disable=args.no_progress,
        dynamic_ncols=True,
    )
    compiled: dict[int, object] = {}
    chunks = 0
    interrupted = False
    try:
        while int(runner.update) < config.num_updates:
            n = min(args.chunk, config.num_updates - int(runner.update))
            if n not in compiled:
                tc = time.time()
                compiled[n] = run.lower(runner, n).compile()
                print(f"compiled a {n}-update chunk in {time.time() - tc:.1f} s", flush=True)
            tc = time.time()
            runner, metrics = compiled[n](runner)
            metrics = jax.device_get(metrics)
            elapsed = time.time() - tc
            rows = [_host_metrics(metrics, i) for i in range(n)]
            for row in rows:
                row["wall_s"] = round(time.time() - t0, 2)
            log.append(rows)
            chunks += 1
            if chunks % args.checkpoint_every == 0 or int(runner.update) >= config.num_updates:
                ckpt.save(runner)
            eps = {b: sum(r[f"episodes_per_bot_{b}"] for r in rows) for b in BOT_TYPES}
            wins = {b: sum(r[f"npc_wins_per_bot_{b}"] for r in rows) for b in BOT_TYPES}
            rets = [r["return_mean"] for r in rows if not math.isnan(r["return_mean"])]
            post = {"sps": f"{n * config.steps_per_update / elapsed:,.0f}"}
            post["ret"] = f"{np.mean(rets):.3f}" if rets else "-"
            for b in config.bots:
                post[f"win_{b[:3]}"] = f"{wins[b] / eps[b]:.2f}" if eps[b] else "-"
            bar.set_postfix(post, refresh=False)
            bar.update(n * config.steps_per_update)
            if chunks % 10 == 0:
                plot_curves(log.rows, run_dir / "learning_curve.png", f"Combination {config.combination}")
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: the unfinished chunk is lost, saved checkpoints are intact", file=sys.stderr)
    finally:
        bar.close()
    plot = plot_curves(log.rows, run_dir / "learning_curve.png", f"Combination {config.combination}")
    step = ckpt.latest_step()
    ckpt.close()
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
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())

"""Fit the arena's knobs to the paper's Combination A row (Table 6): train A on a grid of knobs, play
every squad, and score each point of the grid against the paper's nine outcome figures and three means.

The paper's Table 1 alone makes the squad win everything; its A row (8 / 90 / 11% NPC wins against
the aggressive, evasive and balanced bots, 78-104 s episodes) says the Unity arena played otherwise.
A's recipe and training budget are fixed before the fit (`--preset`, `--total-steps`), so the
training length is not a hidden knob. Every point of the grid is `--seeds` training seeds of that
recipe, trained in one program (`jaxarena-train --sweep arena.KNOB=...`: the knobs ride in the
runner state), each played on `--episodes` fit episodes per bot from the fit key. The points are
pooled over seeds and scored:
- each NPC win %, bot win % and timeout % inside the paper's 95% Wilson interval (n = 100);
- each mean episode length (a timeout counts as its 120 s) within 10 s of the paper's.

    python studies/calibrate_arena.py --grid arena.bot_hp=300,600 arena.npc_melee_damage=5,15 \
        --seeds 3 --seed 5000 --total-steps 4e6 --episodes 200 --out runs/calibrate

Writes `OUT/calibrate_arena.json` (every run's and every point's figures and score),
`OUT/calibrate_arena.md` (the points, best first) and `OUT/calibrate_arena.png` (each point's nine
figures against the paper's intervals). The training runs are `OUT/train/...`, resumable as any
`jaxarena-train` run: the same command again picks up where it stopped. The fit's seeds and
episodes are the fit's own; a fitted arena is reported on other seeds and `train_many.EVAL_KEY`'s
episodes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from jaxarena.algorithms import train_loop
from jaxarena.algorithms.checkpoint import load_params
from jaxarena.algorithms.config import PPOConfig
from jaxarena.algorithms.evaluation import play_per_bot, wilson_interval
from jaxarena.algorithms.multi_run import parse_sweep, plan_runs
from jaxarena.algorithms.train_many import EVAL_KEY
from jaxarena.cli_errors import ArgumentParser, UserError, cli_main
from jaxarena.names import BOT_TYPES, BOT_WIN, EPISODE_S, NPC_WIN, TIMEOUT
from jaxarena.protocol.tables import PAPER_TABLE6

#: The fit's episodes: a root key no training, test or report uses (`train_many.EVAL_KEY` is 3_100_019).
FIT_KEY = 4_200_023
#: The paper's n per bot, which its intervals are drawn at.
PAPER_N = 100
#: How far a mean episode length may lie from the paper's, in seconds.
MEAN_TOLERANCE_S = 10.0
RATES = (("npc_win", NPC_WIN, 3), ("bot_win", BOT_WIN, 4), ("timeout", TIMEOUT, 5))  # Table 6's columns


def parse_args(argv=None) -> argparse.Namespace:
    p = ArgumentParser(prog="calibrate_arena.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--grid",
        nargs="+",
        default=[],
        help="arena.KNOB=V1,V2 items, as jaxarena-train --sweep (none: the scenario alone, one point)",
    )
    p.add_argument("--scenario", default="paper", help="the arena the knobs change (jaxarena-train --scenario)")
    p.add_argument(
        "--key",
        type=int,
        default=FIT_KEY,
        help=f"root key of the episodes played (default {FIT_KEY}, the fit's own; a fitted arena is reported "
        f"on other seeds and {EVAL_KEY}, the training runs' held-out key)",
    )
    p.add_argument(
        "--seeds", type=int, default=3, help="training seeds per point (3 or more: a point is no one seed's luck)"
    )
    p.add_argument("--seed", type=int, default=5000, help="the first training seed")
    p.add_argument("--preset", default="default", help="A's recipe (jaxarena-train --preset)")
    p.add_argument("--total-steps", type=float, default=4e6, help="A's training budget, env steps, fixed for the fit")
    p.add_argument("--episodes", type=int, default=200, help="episodes per bot and run")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more of A's recipe, as jaxarena-train")
    p.add_argument("--out", type=Path, required=True, help="folder of the training runs and the fit's files")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.episodes < 1:
        p.error("--seeds and --episodes must be >= 1")
    try:
        sweep = parse_sweep(args.grid) if args.grid else {}
    except ValueError as exc:
        p.error(str(exc))
    if any(not key.startswith("arena.") for key in sweep):
        p.error("--grid takes arena knobs only (arena.KNOB=V1,V2): the recipe is fixed by --preset")
    args.sweep = sweep
    return args


def outcome_figures(outcome: np.ndarray, episode_time: np.ndarray) -> dict:
    """Table 6's figures of pooled episodes: each rate in % with its 95% Wilson interval, and the mean."""
    n = len(outcome)
    figures = {"n": n, "mean_s": float(np.mean(np.where(outcome == TIMEOUT, EPISODE_S, episode_time)))}
    for name, code, _ in RATES:
        k = int(np.sum(outcome == code))
        lo, hi = wilson_interval(k, n)
        figures[name] = {"pct": 100 * k / n, "lo": 100 * lo, "hi": 100 * hi}
    return figures


def run_figures(episodes: dict) -> dict:
    """One run's Table 6 figures per bot, from its played episodes."""
    return {bot: outcome_figures(e["outcome"], e["episode_time"]) for bot, e in episodes.items()}


def paper_targets() -> dict:
    """Per bot: the paper's rates with their 95% Wilson intervals at n = 100, and its mean."""
    targets = {}
    for bot, row in PAPER_TABLE6.items():
        target = {"mean_s": row[0]}
        for name, _, column in RATES:
            lo, hi = wilson_interval(round(row[column]), PAPER_N)
            target[name] = {"pct": row[column], "lo": 100 * lo, "hi": 100 * hi}
        targets[bot] = target
    return targets


def score(figures: dict, targets: dict) -> dict:
    """Which of the twelve checks a point passes, and its distance to the paper (pp and s, summed)."""
    misses, distance = [], 0.0
    for bot in BOT_TYPES:
        ours, paper = figures[bot], targets[bot]
        for name, _, _ in RATES:
            pct = ours[name]["pct"]
            distance += abs(pct - paper[name]["pct"])
            if not paper[name]["lo"] <= pct <= paper[name]["hi"]:
                misses.append(f"{bot} {name}")
        gap = ours["mean_s"] - paper["mean_s"]
        distance += abs(gap)
        if abs(gap) > MEAN_TOLERANCE_S:
            misses.append(f"{bot} mean")
    return {"passed": 12 - len(misses), "misses": misses, "distance": distance}


def evaluate(runs, root: Path, episodes: int, key: int = FIT_KEY) -> list[dict]:
    """Every run's final squad on `episodes` per bot from root `key`: its folder, seed, setting and episodes."""
    played = []
    for i, run in enumerate(runs):
        config, params = load_params(root / run.name)
        per_bot = play_per_bot(config, params, episodes, key)
        played.append({"run": run.name, "seed": run.config.seed, "setting": run.setting_name, "episodes": per_bot})
        print(f"played {i + 1}/{len(runs)}: {run.name}", file=sys.stderr, flush=True)
    return played


def points(played: list[dict], targets: dict) -> list[dict]:
    """The runs pooled per setting, scored, best first (most checks passed, then nearest)."""
    settings = {}
    for row in played:
        settings.setdefault(row["setting"], []).append(row)
    out = []
    for setting, rows in settings.items():
        figures = {}
        for bot in BOT_TYPES:
            outcome = np.concatenate([r["episodes"][bot]["outcome"] for r in rows])
            episode_time = np.concatenate([r["episodes"][bot]["episode_time"] for r in rows])
            figures[bot] = outcome_figures(outcome, episode_time)
        seeds = [r["seed"] for r in rows]
        out.append({"setting": setting, "seeds": seeds, "figures": figures, **score(figures, targets)})
    return sorted(out, key=lambda p: (-p["passed"], p["distance"]))


def render(points_: list[dict], targets: dict, args) -> str:
    lines = [
        "# Calibrating the arena to the paper's A row",
        "",
        f"Recipe `{args.preset}`, {args.total_steps:.3g} env steps, {args.seeds} seeds per point from "
        f"{args.seed}, on scenario `{args.scenario}`; {args.episodes} episodes per bot and seed (key {args.key}). "
        "A cell is NPC win / "
        "bot win / timeout % and the mean episode (s); the paper's row first, with its 95% intervals.",
        "",
        "| point | checks | aggressive | evasive | balanced | misses |",
        "|---|---:|---|---|---|---|",
    ]

    def cell(f):
        return " / ".join(f"{f[n]['pct']:.0f}" for n, _, _ in RATES) + f", {f['mean_s']:.0f} s"

    def paper_cell(t):
        rates = " / ".join(f"{t[n]['pct']:.0f} [{t[n]['lo']:.0f}, {t[n]['hi']:.0f}]" for n, _, _ in RATES)
        return f"{rates}, {t['mean_s']:.0f} s"

    lines.append("| paper (Table 6) | 12 | " + " | ".join(paper_cell(targets[b]) for b in BOT_TYPES) + " | |")
    for p in points_:
        cells = " | ".join(cell(p["figures"][b]) for b in BOT_TYPES)
        lines.append(f"| {p['setting']} | {p['passed']} | {cells} | {', '.join(p['misses']) or 'none'} |")
    return "\n".join(lines) + "\n"


def plot(points_: list[dict], targets: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    for ax, bot in zip(axes, BOT_TYPES, strict=True):
        for j, (name, _, _) in enumerate(RATES):
            t = targets[bot][name]
            ax.add_patch(plt.Rectangle((j - 0.4, t["lo"]), 0.8, t["hi"] - t["lo"], color="0.85"))
            ax.plot([j - 0.4, j + 0.4], [t["pct"]] * 2, color="black", lw=1.5)
            xs = j + np.linspace(-0.3, 0.3, max(len(points_), 1))
            ys = [p["figures"][bot][name]["pct"] for p in points_]
            ax.scatter(xs[: len(ys)], ys, s=14, c=range(len(ys)), cmap="viridis", zorder=3)
        ax.set_xticks(range(len(RATES)), [n.replace("_", " ") for n, _, _ in RATES])
        ax.set_title(f"{bot} bot")
        ax.set_ylim(-2, 102)
    axes[0].set_ylabel("% of episodes")
    fig.suptitle("Grid points (dots, best first: dark) against the paper's A row (line) and its 95% interval (grey)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@cli_main("calibrate_arena.py")
def main(argv=None) -> int:
    args = parse_args(argv)
    root = args.out / "train"
    started = time.time()
    train_args = ["--combination", "A", "--preset", args.preset, "--seed", str(args.seed), "--seeds", str(args.seeds)]
    train_args += ["--total-steps", str(int(args.total_steps)), "--eval-episodes", "0", "--out", str(root)]
    train_args += ["--scenario", args.scenario, *(["--sweep", *args.grid] if args.grid else [])]
    train_args += ["--set", *args.set] if args.set else []
    code = train_loop.main(train_args)
    if code:
        raise UserError(f"training stopped with status {code}: run the same command again to resume")
    base = PPOConfig.preset(args.preset, combination="A", scenario=args.scenario, total_timesteps=int(args.total_steps))
    runs = plan_runs(base, range(args.seed, args.seed + args.seeds), args.sweep)
    targets = paper_targets()
    played = evaluate(runs, root, args.episodes, args.key)
    scored = points(played, targets)
    record = {
        "command": "python studies/calibrate_arena.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "preset": args.preset,
        "total_steps": int(args.total_steps),
        "scenario": args.scenario,
        "key": args.key,
        "episodes_per_bot_and_seed": args.episodes,
        "paper": targets,
        "points": scored,
        # Each run's own figures too: a single squad's episodes can be replayed and compared.
        "runs": [
            {**{k: v for k, v in r.items() if k != "episodes"}, "figures": run_figures(r["episodes"])} for r in played
        ],
        "wall_s": round(time.time() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibrate_arena.json").write_text(json.dumps(record, indent=2, default=_plain))
    (args.out / "calibrate_arena.md").write_text(render(scored, targets, args))
    plot(scored, targets, args.out / "calibrate_arena.png")
    best = scored[0]
    print(f"best point: {best['setting']} ({best['passed']}/12 checks; misses: {', '.join(best['misses']) or 'none'})")
    print(f"wrote {args.out / 'calibrate_arena.md'}")
    return 0


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value)}")


if __name__ == "__main__":
    sys.exit(main())

"""A seed the default recipe fails: what its run does, and which change makes it learn.

Trains one seed of Combination A's `default` recipe under several settings of the float
hyper-parameters in one program (they ride in the runner state, so the settings share it), and
plays each final policy on 1,000 held-out episodes per bot. Every setting starts from the same key,
so each differs from the baseline by its change alone: the same network initialisation, the same
arenas, the same first samples.

`--key-derivation bare` starts from `PRNGKey(seed)`, as training runs did before their keys
folded a stream constant (`jaxarena.key_streams`); `folded` (the default) starts where
`jaxarena-train --seed SEED` does today. Seed 108 under `bare` is the seed an outside check
found collapsing: 0 training wins against the evasive bot, entropy 0.30 at 10M steps.

    python studies/seed_rescue.py --seed 108 --key-derivation bare --out runs/seed108
    python studies/seed_rescue.py --seed 1006 --settings ent_coef=0.04 approach_shaping=1.0 --out runs/seed1006

Writes `OUT/seed_rescue.json` (each setting's curve every chunk: env steps, entropy, training win
rate per bot; its final held-out win rates and its behaviour against the evasive bot) and
`OUT/seed_rescue.png`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.algorithms.batch_runs import init_runs, run_fns
from jaxarena.algorithms.checkpoint import make_policy
from jaxarena.algorithms.config import SWEEPABLE, PPOConfig, parse_field
from jaxarena.algorithms.driver import take
from jaxarena.algorithms.evaluation import run_episodes, win_rates
from jaxarena.algorithms.ppo import make_trainer
from jaxarena.algorithms.ppo_objective import hyper_of
from jaxarena.algorithms.train_many import EVAL_KEY
from jaxarena.algorithms.train_metrics import host_metrics
from jaxarena.cli_errors import ArgumentParser, UserError, cli_main
from jaxarena.key_streams import training_key
from jaxarena.names import BOT_TYPES, NPC_WIN, TIMEOUT


def parse_args(argv=None) -> argparse.Namespace:
    p = ArgumentParser(prog="seed_rescue.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, required=True, help="the training seed to study")
    p.add_argument(
        "--key-derivation",
        choices=("folded", "bare"),
        default="folded",
        help="folded: the key jaxarena-train starts from today; bare: PRNGKey(seed), as runs did before",
    )
    p.add_argument(
        "--settings",
        nargs="*",
        default=["ent_coef=0.04", "ent_coef=0.08", "approach_shaping=1.0", "approach_range=6.0"],
        metavar="KEY=VALUE",
        help="changes to the default recipe, one per setting, each a float hyper-parameter "
        f"({', '.join(SWEEPABLE)}); the unchanged recipe is always played first",
    )
    p.add_argument("--total-steps", type=float, default=None, help="env steps per setting (default: the recipe's)")
    p.add_argument("--episodes", type=int, default=1000, help="held-out episodes per bot for each final policy")
    p.add_argument("--chunk", type=int, default=10, help="updates per jitted call (one curve point)")
    p.add_argument("--out", required=True, help="folder for seed_rescue.json and seed_rescue.png")
    return p.parse_args(argv)


def settings_of(items: list[str]) -> list[tuple[str, dict]]:
    """[(label, changes)]: the baseline first, then one setting per KEY=VALUE item."""
    out = [("default", {})]
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in SWEEPABLE:
            raise UserError(f"--settings {item!r}: not KEY=VALUE with KEY one of {', '.join(SWEEPABLE)}")
        out.append((item, {key: parse_field(key, raw)}))
    return out


@cli_main("seed_rescue.py")
def main(argv=None) -> int:
    args = parse_args(argv)
    settings = settings_of(args.settings)
    base = PPOConfig.preset("default", seed=args.seed)
    if args.total_steps is not None:
        base = base.replace(total_timesteps=int(args.total_steps))
    configs = [base.replace(**changes) for _, changes in settings]
    trainer = make_trainer(base, mesh=None)
    key = training_key(args.seed) if args.key_derivation == "folded" else jax.random.PRNGKey(args.seed)
    keys = jnp.stack([key] * len(configs))
    hypers = jax.tree.map(lambda *xs: jnp.stack(xs), *[hyper_of(c) for c in configs])
    runner = jax.jit(lambda k, h: init_runs(trainer, k, h))(keys, hypers)
    run = jax.jit(run_fns(trainer, batched=True)[1], static_argnums=1, donate_argnums=0)
    curves = [[] for _ in configs]
    t0 = time.time()
    while (update := int(np.asarray(runner.update)[0])) < base.num_updates:
        n = min(args.chunk, base.num_updates - update)
        runner, metrics = run(runner, n)
        metrics = jax.device_get(metrics)
        for i, curve in enumerate(curves):
            rows = [host_metrics(take(metrics, i), j) for j in range(n)]
            curve.append(_point(rows))
        print(
            f"{curves[0][-1]['env_steps'] / 1e6:.1f}M steps, {time.time() - t0:.0f} s: "
            + "; ".join(
                f"{label} ent {c[-1]['entropy']:.2f} win {c[-1]['win_evasive']:.2f}"
                for (label, _), c in zip(settings, curves, strict=True)
            ),
            flush=True,
        )
    policy = make_policy(base)
    results = []
    for i, ((label, changes), curve) in enumerate(zip(settings, curves, strict=True)):
        params = take(runner.train_state.params, i)
        rates = win_rates(base, params, args.episodes, EVAL_KEY)
        play = run_episodes(policy, params, "evasive", n=args.episodes, seed=EVAL_KEY)
        behaviour = {
            "mean_distance_to_evasive_bot": float(np.mean(play["mean_distance"])),
            "damage_dealt_to_evasive_bot": float(np.mean(play["damage_dealt"])),
            "timeout_share_vs_evasive": float(np.mean(play["outcome"] == TIMEOUT)),
            "win_share_vs_evasive": float(np.mean(play["outcome"] == NPC_WIN)),
        }
        results.append(
            {"setting": label, "changes": changes, "held_out": rates, "behaviour": behaviour, "curve": curve}
        )
        print(f"{label}: held-out " + " / ".join(f"{100 * rates[b]:.1f}" for b in BOT_TYPES) + f"%; {behaviour}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "seed": args.seed,
        "key_derivation": args.key_derivation,
        "eval_key": EVAL_KEY,
        "episodes": args.episodes,
        "settings": results,
    }
    (out / "seed_rescue.json").write_text(json.dumps(record, indent=2) + "\n")
    _plot(results, out / "seed_rescue.png", f"seed {args.seed} ({args.key_derivation} key)")
    print(f"wrote {out / 'seed_rescue.json'} and {out / 'seed_rescue.png'}")
    return 0


def _point(rows: list[dict]) -> dict:
    """A chunk's curve point: its last env step, mean entropy and training win rate per bot it fought."""
    point = {"env_steps": rows[-1]["env_steps"], "entropy": float(np.mean([r["entropy"] for r in rows]))}
    for b in BOT_TYPES:
        eps = sum(r[f"episodes_per_bot_{b}"] for r in rows)
        point[f"win_{b}"] = sum(r[f"npc_wins_per_bot_{b}"] for r in rows) / eps if eps else float("nan")
    return point


def _plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for r in results:
        x = [p["env_steps"] / 1e6 for p in r["curve"]]
        axes[0].plot(x, [p["win_evasive"] for p in r["curve"]], label=r["setting"])
        axes[1].plot(x, [p["entropy"] for p in r["curve"]], label=r["setting"])
    axes[0].set_ylabel("training win rate vs the evasive bot")
    axes[1].set_ylabel("policy entropy (nats)")
    for ax in axes:
        ax.set_xlabel("env steps (millions)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

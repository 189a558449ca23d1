"""The tag-response matrix: does each tag produce its own intent, and does B still win?

    python benchmarks/tag_response.py                                  # the shipped B vs A, 500 episodes
    python benchmarks/tag_response.py --policy B-raid --reference A-raid --scenario raid --markdown

Rows: a tag held for the whole episode. Columns: the four intent measures of
`jaxarena.analysis.intents` (coverage for Surround, damage rate for Aggressive, flank
share for Flank, far share for Retreat) and, for reference, the mean distance
to the bot and the lateral share at any distance, each a mean over `--episodes`
seeded episodes with its 95% CI (mean +- 1.96 standard errors). Every cell
replays the same seeded starts, and so does the reference A, so tags and
policies are compared on paired episodes.

Targets: for every bot, each measure is best under its own tag
with CIs apart from every other tag's (`own_tag_best`), and B's best tag
wins within 5 points of A (`best_tag_gap_points` <= 5). Prints one JSON
line per (bot, tag) and a summary line; `--markdown` adds the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import numpy as np

from jaxarena.algorithms.checkpoint import load_policy
from jaxarena.algorithms.evaluation import run_episodes, tag_response, wilson_interval
from jaxarena.analysis.intents import DIRECTION, EXTRA_MEASURES, MEASURES
from jaxarena.names import BOT_TYPES, FLANK, NPC_WIN, NUM_TAGS, TAG_NAMES


def mean_ci(x: np.ndarray) -> tuple[float, float, float]:
    m, se = float(np.mean(x)), float(np.std(x, ddof=1) / np.sqrt(len(x)))
    return m, m - 1.96 * se, m + 1.96 * se


def own_tag_best(cells: list[tuple[float, float, float]], tag: int, direction: float) -> bool:
    """Whether `tag`'s CI lies strictly on the intent side of every other tag's CI."""
    _, lo, hi = cells[tag]
    for other, (_, olo, ohi) in enumerate(cells):
        if other == tag:
            continue
        if (direction > 0 and lo <= ohi) or (direction < 0 and hi >= olo):
            return False
    return True


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="B", help="the B policy: packaged name or run directory")
    p.add_argument("--reference", default="A", help="the A policy it is compared with")
    p.add_argument("--episodes", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bots", nargs="+", default=list(BOT_TYPES), choices=BOT_TYPES)
    p.add_argument("--scenario", default=None, help="arena preset (default: the one the policy was trained on)")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()

    t0 = time.perf_counter()
    policy, params = load_policy(args.policy)
    scenario = args.scenario or policy.scenario
    resp = tag_response(
        policy, params, tuple(args.bots), n=args.episodes, seed=args.seed, env_id=policy.env_id, scenario=scenario
    )
    ref, ref_params = load_policy(args.reference)
    summary = {
        "bench": "tag_response",
        "policy": args.policy,
        "reference": args.reference,
        "scenario": scenario,
        "episodes": args.episodes,
        "bots": {},
    }
    tables = []
    for b, bot in enumerate(args.bots):
        a = run_episodes(ref, ref_params, bot, n=args.episodes, seed=args.seed, env_id=ref.env_id, scenario=scenario)
        a_wins = int(np.sum(a["outcome"] == NPC_WIN))
        a_rate = a_wins / args.episodes
        cells = {m: [mean_ci(resp[m][b, t]) for t in range(NUM_TAGS)] for m in (*MEASURES, *EXTRA_MEASURES)}
        wins = resp["npc_win"][b].sum(axis=1)
        for t in range(NUM_TAGS):
            lo, hi = wilson_interval(int(wins[t]), args.episodes)
            row = {
                "bench": "tag_response",
                "bot": bot,
                "tag": TAG_NAMES[t],
                "npc_win": wins[t] / args.episodes,
                "npc_win_ci": [round(lo, 4), round(hi, 4)],
                **{m: [round(v, 4) for v in cell[t]] for m, cell in cells.items()},
            }
            print(json.dumps(row), flush=True)
        own = {TAG_NAMES[t]: own_tag_best(cells[m], t, DIRECTION[t]) for t, m in enumerate(MEASURES)}
        # Flank's earlier measure, at any distance (jaxarena.analysis.intents), still reported.
        flank_lateral = own_tag_best(cells["lateral_share"], FLANK, DIRECTION[FLANK])
        best = int(np.argmax(wins))
        gap = 100 * (a_rate - wins[best] / args.episodes)
        summary["bots"][bot] = {
            "own_tag_best": own,
            "flank_best_by_lateral_share": flank_lateral,
            "a_npc_win": a_rate,
            "best_tag": TAG_NAMES[best],
            "best_tag_npc_win": wins[best] / args.episodes,
            "best_tag_gap_points": round(gap, 1),
        }
        tables.append((bot, cells, wins, a_rate, own, flank_lateral))
    bots = summary["bots"].values()
    summary["cells_separated"] = sum(sum(v["own_tag_best"].values()) for v in bots)
    summary["intents_separated"] = all(all(v["own_tag_best"].values()) for v in bots)
    summary["best_tag_within_5_points"] = all(v["best_tag_gap_points"] <= 5 for v in bots)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(summary), flush=True)
    if args.markdown:
        for bot, cells, wins, a_rate, own, flank_lateral in tables:
            print(f"\n**{bot} bot** ({args.episodes} episodes per row; A wins {100 * a_rate:.1f}%)\n")
            print("| tag held | win % | " + " | ".join(cells) + " |")
            print("|---|---|" + "---|" * len(cells))
            for t in range(NUM_TAGS):
                vals = []
                for m_i, cell in enumerate(cells.values()):
                    mean, lo, hi = cell[t]
                    mark = "**" if m_i == t else ""
                    vals.append(f"{mark}{mean:.3f} [{lo:.3f}, {hi:.3f}]{mark}")
                print(f"| {TAG_NAMES[t]} | {100 * wins[t] / args.episodes:.1f} | " + " | ".join(vals) + " |")
            print("\nown tag best (CIs apart): " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in own.items()))
            print(f"Flank best by lateral share at any distance: {'yes' if flank_lateral else 'no'}")


if __name__ == "__main__":
    main()

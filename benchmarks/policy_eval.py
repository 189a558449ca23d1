"""Evaluate trained policies: win rates with 95% Wilson CIs, references, B's tag response.

    python benchmarks/policy_eval.py --policy A --episodes 1000            # shipped A, sampled and greedy
    python benchmarks/policy_eval.py --tag-response B-paper --episodes 300  # the paper recipe's B under each fixed tag
    python benchmarks/policy_eval.py --policy A-raid --episodes 500 --modes sampled --json out/a-raid.json

Outcomes are over `--episodes` seeded episodes per bot, one episode per
arena, all in one batch (see `jaxarena.algorithms.evaluation`). References:
a uniformly random squad, a scripted focus-fire squad (every NPC walks at
the bot and melees when it can) and a chase-and-orb squad (the same, but
within 11 u it fires an orb with probability 0.8). A policy plays on the arena preset it was trained
on (`raid` for A-raid), the references on `paper`. Prints JSON lines; `--markdown` adds tables; `--json OUT`
writes the outcomes as one JSON file, {"policies": {label: {bot: row}}}, the label as printed
("A (sampled)"), which `jaxarena-claims check` reads.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import numpy as np

from jaxarena.algorithms.checkpoint import load_policy
from jaxarena.algorithms.evaluation import outcome_summary, paired_gain, run_episodes, tag_response
from jaxarena.names import BOT_TYPES, NUM_TAGS, TAGS
from jaxarena.policies import chase_and_orb_policy, focus_fire_policy, random_policy


def fmt(s):
    return f"{100 * s['rate']:.1f}% [{100 * s['lo']:.1f}, {100 * s['hi']:.1f}]"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default=None, help="run dir or packaged name (A/B) to evaluate for outcomes")
    p.add_argument("--tag-response", default=None, help="run dir or packaged name of a Combination B policy")
    p.add_argument("--episodes", type=int, default=1000, help="episodes per bot (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="the episodes' seed (default 0)")
    p.add_argument(
        "--modes",
        nargs="+",
        default=["sampled", "greedy"],
        choices=["sampled", "greedy"],
        help="sample the policy's actions, take its most likely ones, or both (default both)",
    )
    p.add_argument("--references", action="store_true", help="also evaluate random and focus-fire squads")
    p.add_argument("--markdown", action="store_true", help="also print the results as markdown tables")
    p.add_argument("--json", default=None, metavar="OUT", help="also write the outcomes to this JSON file")
    args = p.parse_args()
    table = []

    def outcomes(label, policy, params=None, **kw):
        for bot in BOT_TYPES:
            t = time.time()
            res = run_episodes(policy, params, bot, n=args.episodes, seed=args.seed, **kw)
            summ = outcome_summary(res["outcome"])
            row = dict(
                policy=label,
                bot=bot,
                n=args.episodes,
                seconds=round(time.time() - t, 1),
                mean_time_s=float(np.mean(res["episode_time"])),
                **{k: v for k, v in summ.items() if k != "n"},
            )
            print(json.dumps(row), flush=True)
            table.append(row)

    if args.policy:
        for mode in args.modes:
            policy, params = load_policy(args.policy, greedy=(mode == "greedy"))
            outcomes(f"{args.policy} ({mode})", policy, params, env_id=policy.env_id, scenario=policy.scenario)
    if args.references:
        outcomes("focus-fire (scripted)", focus_fire_policy)
        outcomes("chase-and-orb (scripted, p=0.8)", chase_and_orb_policy)
        outcomes("random", random_policy)
    if args.json and table:
        by_policy: dict = {}
        for row in table:
            by_policy.setdefault(row["policy"], {})[row["bot"]] = row
        result = {"episodes": args.episodes, "seed": args.seed, "policies": by_policy}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if args.markdown and table:
        print("\n| policy | bot | NPC win [95% CI] | bot win [95% CI] | timeout [95% CI] | mean length (s) |")
        print("|---|---|---|---|---|---|")
        for r in table:
            print(
                f"| {r['policy']} | {r['bot']} | {fmt(r['npc_win'])} | {fmt(r['bot_win'])} | {fmt(r['timeout'])} "
                f"| {r['mean_time_s']:.1f} |"
            )

    if args.tag_response:
        rows = []
        for mode in args.modes:
            policy, params = load_policy(args.tag_response, greedy=(mode == "greedy"))
            label = f"{args.tag_response} ({mode})"
            resp = tag_response(policy, params, BOT_TYPES, n=args.episodes, seed=args.seed, env_id=policy.env_id)
            gains = {}
            for b, bot in enumerate(BOT_TYPES):
                for tag in range(NUM_TAGS):
                    row = {
                        "policy": label,
                        "bot": bot,
                        "tag": tag,
                        "tag_name": TAGS[tag],
                        "mean_distance": float(resp["mean_distance"][b, tag].mean()),
                        "lateral_share": float(resp["lateral_share"][b, tag].mean()),
                        "npc_win": float(resp["npc_win"][b, tag].mean()),
                    }
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            # The paired gains the tests check: per episode, averaged over the bots.
            for name, key, tag, than in (
                ("retreat_minus_aggressive_distance", "mean_distance", 3, 1),
                ("flank_minus_aggressive_lateral", "lateral_share", 2, 1),
            ):
                mean, se = paired_gain(resp[key], tag, than)
                gains[name] = {"mean": mean, "se": se}
            print(json.dumps({"policy": label, "paired_gains": gains, "n": args.episodes, "seed": args.seed}))
        if args.markdown:
            print("\n| policy | bot | tag | mean NPC-bot distance (u) | lateral share | NPC win |")
            print("|---|---|---|---|---|---|")
            for r in rows:
                print(
                    f"| {r['policy']} | {r['bot']} | {r['tag']} {r['tag_name']} | {r['mean_distance']:.2f} | "
                    f"{r['lateral_share']:.3f} | {r['npc_win']:.2f} |"
                )


if __name__ == "__main__":
    main()

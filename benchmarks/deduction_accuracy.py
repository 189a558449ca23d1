"""How well is the opponent deduced? The LLM's table beside a logistic regression and the majority class.

    python benchmarks/deduction_accuracy.py                       # B-paper, shipped table, paper + headroom
    python benchmarks/deduction_accuracy.py --episodes 128 --tags hold --markdown

The tag-following `--policy` (default B-paper, the squad the docs measured) plays the
three scripted bots while the tag is random each period (`--tags random`) or one random
tag held for the episode (`--tags hold`). At every decision a `TagSource` (with a carry) pushes the batch's
`DecisionHistory` (the tag state it carries) and records the history and
the truth (`history.opponent_class`). Then, per bot, on held-out episodes:

- `llm`: the argmax of the strategy table's deduction for the quantised history;
- `llm_calibrated`: the same probabilities divided by their mean over the
  training decisions (label-free prior correction, to see past the model's
  preference for one digit);
- `logreg`: a multinomial logistic regression on the same unquantised
  features (nearest distance and approach at the three points, and which
  points were seen), trained on separate episodes of all three bots;
- `logreg_all`: the same on every history feature (HP and alive fractions too);
- `majority`: the training set's most frequent class.

Accuracy is over the four `OPPONENT_CLASSES` and over the style alone
(aggressive / evasive / balanced). Prints one JSON line per (scenario, bot,
method), a summary line, and with `--markdown` the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import jax
import jax.numpy as jnp
import numpy as np

import jaxarena
from jaxarena.algorithms.checkpoint import load_policy
from jaxarena.llm.deduction import deduction_cell
from jaxarena.llm.history import (
    APPROACH,
    HISTORY_LEN,
    NEAREST,
    NUM_OPPONENT_CLASSES,
    NUM_POINT_FEATURES,
    OPPONENT_CLASSES,
    DecisionHistory,
    opponent_class,
    push,
)
from jaxarena.llm.logistic import fit_logistic, majority_class, predict
from jaxarena.llm.strategy_table import load_table
from jaxarena.names import BOT_TYPES, NUM_TAGS
from jaxarena.runner import make_runner
from jaxarena.tag_sources import TagSource

#: An opponent class's style: aggressive, evasive, balanced (either mode).
STYLE_OF_CLASS = np.array([0, 1, 2, 2])
METHODS = ("llm", "llm_calibrated", "logreg", "logreg_all", "majority")


def history_source(tags: str) -> TagSource:
    """Carries the batch's `DecisionHistory`; aux is each decision's history and truth."""

    def init(n):
        return DecisionHistory(
            points=jnp.zeros((n, HISTORY_LEN, NUM_POINT_FEATURES), jnp.float32),
            valid=jnp.zeros((n, HISTORY_LEN), bool),
            bot_pos=jnp.zeros((n, 2), jnp.float32),
            centroid=jnp.zeros((n, 2), jnp.float32),
        )

    def step(history, features, prev_tags, done, time_s, key, state=None, params=None):
        history = jax.vmap(push, in_axes=(0, 0, None))(history, state, params)
        truth = jax.vmap(opponent_class, in_axes=(0, None))(state, params)
        chosen = jax.random.randint(key, prev_tags.shape, 0, NUM_TAGS) if tags == "random" else prev_tags
        return chosen, {"points": history.points, "valid": history.valid, "truth": truth}, history

    return TagSource(step, init, reads_state=True)


def collect(run, policy_params, params, n: int, seed: int) -> dict[str, np.ndarray]:
    """The decisions actually made in `n` episodes: points (M, 3, 5), valid (M, 3), truth (M,)."""
    key = jax.random.PRNGKey(seed)
    initial = jax.random.randint(jax.random.fold_in(key, 1), (n,), 0, NUM_TAGS)
    result = jax.device_get(run(policy_params, params, key, initial_tag=initial))
    active = np.asarray(result.decision_active)
    return {k: np.asarray(v)[active] for k, v in result.decision_aux.items()}


def same_features(d: dict) -> np.ndarray:
    """What the LLM reads, unquantised: distance and approach at the three points, and which were seen."""
    pts = d["points"]
    return np.concatenate([pts[:, :, NEAREST], pts[:, :, APPROACH], d["valid"]], axis=1)


def all_features(d: dict) -> np.ndarray:
    return np.concatenate([d["points"].reshape(len(d["points"]), -1), d["valid"]], axis=1)


def llm_probs(table, d: dict) -> np.ndarray:
    n = len(d["valid"])
    history = DecisionHistory(jnp.asarray(d["points"]), jnp.asarray(d["valid"]), jnp.zeros((n, 2)), jnp.zeros((n, 2)))
    cells = jax.vmap(deduction_cell)(history)
    return np.asarray(table.deduction_probs)[np.asarray(cells)]


def concat(parts: list[dict]) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def evaluate_scenario(args, policy, policy_params, table, scenario: str) -> list[dict]:
    env, base = jaxarena.make(policy.env_id, scenario=scenario)
    run = make_runner(env, base, policy, history_source(args.tags), args.episodes)
    train, test = {}, {}
    for b, bot in enumerate(BOT_TYPES):
        params = base.replace(bot_type=b)
        train[bot] = collect(run, policy_params, params, args.episodes, args.seed + 2 * b)
        test[bot] = collect(run, policy_params, params, args.episodes, args.seed + 2 * b + 1000)
    pooled = concat(list(train.values()))
    y = pooled["truth"]
    models = {
        "logreg": (fit_logistic(same_features(pooled), y, NUM_OPPONENT_CLASSES), same_features),
        "logreg_all": (fit_logistic(all_features(pooled), y, NUM_OPPONENT_CLASSES), all_features),
    }
    majority = majority_class(y, NUM_OPPONENT_CLASSES)
    prior = llm_probs(table, pooled).mean(0)
    rows = []
    for bot in BOT_TYPES:
        d = test[bot]
        probs = llm_probs(table, d)
        preds = {
            "llm": probs.argmax(1),
            "llm_calibrated": (probs / prior).argmax(1),
            **{name: predict(model, feats(d)) for name, (model, feats) in models.items()},
            "majority": np.full(len(d["truth"]), majority),
        }
        truth = d["truth"]
        for method in METHODS:
            pred = preds[method]
            rows.append(
                {
                    "bench": "deduction_accuracy",
                    "scenario": scenario,
                    "bot": bot,
                    "method": method,
                    "decisions": int(len(truth)),
                    "accuracy": round(float(np.mean(pred == truth)), 4),
                    "style_accuracy": round(float(np.mean(STYLE_OF_CLASS[pred] == STYLE_OF_CLASS[truth])), 4),
                    "predicted_share": np.round(
                        np.bincount(pred, minlength=NUM_OPPONENT_CLASSES) / len(pred), 3
                    ).tolist(),
                    "truth_share": np.round(
                        np.bincount(truth, minlength=NUM_OPPONENT_CLASSES) / len(truth), 3
                    ).tolist(),
                    **({"llm_mean_probs": np.round(probs.mean(0), 4).tolist()} if method == "llm" else {}),
                }
            )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "accuracy over the four classes (style only: aggressive / evasive / balanced)\n",
        "| scenario | bot | decisions | " + " | ".join(METHODS) + " |",
        "|---|---|---|" + "---|" * len(METHODS),
    ]
    keys = dict.fromkeys((r["scenario"], r["bot"]) for r in rows)
    for scenario, bot in keys:
        cell = {r["method"]: r for r in rows if r["scenario"] == scenario and r["bot"] == bot}
        vals = [f"{100 * cell[m]['accuracy']:.1f} ({100 * cell[m]['style_accuracy']:.1f})" for m in METHODS]
        n = cell[METHODS[0]]["decisions"]
        lines.append(f"| {scenario} | {bot} | {n} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="B-paper", help="the tag-following policy: packaged name or run directory")
    p.add_argument("--table", default="smollm2-135m", help="strategy table: shipped name or path")
    p.add_argument("--episodes", type=int, default=256, help="episodes per bot, for training and again for testing")
    p.add_argument("--scenarios", nargs="+", default=["paper", "headroom"])
    p.add_argument("--tags", choices=("random", "hold"), default="random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()

    t0 = time.perf_counter()
    policy, policy_params = load_policy(args.policy)
    table = load_table(args.table)
    rows = []
    for scenario in args.scenarios:
        for row in evaluate_scenario(args, policy, policy_params, table, scenario):
            print(json.dumps(row), flush=True)
            rows.append(row)
    summary = {
        "bench": "deduction_accuracy",
        "summary": True,
        "policy": args.policy,
        "table": args.table,
        "table_model": table.metadata.model,
        "tags": args.tags,
        "episodes_per_bot": args.episodes,
        "classes": list(OPPONENT_CLASSES),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    for scenario in args.scenarios:
        for method in METHODS:
            sel = [r for r in rows if r["scenario"] == scenario and r["method"] == method]
            # Per-bot accuracies averaged with equal weight, so no bot dominates by its decision count.
            summary[f"{scenario}/{method}"] = round(float(np.mean([r["accuracy"] for r in sel])), 4)
    print(json.dumps(summary), flush=True)
    if args.markdown:
        print("\n" + markdown(rows))


if __name__ == "__main__":
    main()

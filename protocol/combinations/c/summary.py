"""Combination C's numbers (`summary.json` `selector`): C and its ablations against B, per bot.

From the finished cells alone (numpy/scipy through `protocol.stats`), per bot
and label (A, B and O for context where the run has them, then C and its
ablations):

- outcomes: squad win % with its bootstrap CI, bot-win and timeout shares,
  mean and median time-to-defeat;
- against B on the same paired episodes: the win-rate difference (paired
  bootstrap CI) and Table 8's Mann-Whitney U of time-to-defeat with B's
  durations first (U is B's statistic; r and r_rb < 0 when the label's
  episodes are shorter);
- tags: the distribution of the tags chosen and its entropy in bits
  (2 = all four equally often, 0 = one tag only);
- bias: the LLM's first candidate (its top-1) against the tag chosen, their
  total-variation distance and how often the choice differs from the top-1;
- deduction (where the label uses it): the argmax deduction against the true
  opponent class, and collapsed to the style (aggressive / evasive /
  balanced), with CIs from a bootstrap over episodes, and the confusion
  counts;
- regret (priced decisions only): as B's in the oracle section.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from jaxarena.llm.history import OPPONENT_CLASSES
from jaxarena.names import NPC_WIN

from ... import stats
from .options import played_labels

#: The style of each opponent class: the balanced bot's two modes are one style.
CLASS_STYLE = tuple(name.split("_")[0] for name in OPPONENT_CLASSES)
STYLES = tuple(dict.fromkeys(CLASS_STYLE))
#: Labels shown beside C for context, where the run has them.
CONTEXT = ("A", "B", "O")


def tag_distribution(tags: Sequence[int]) -> dict:
    """`stats.tag_frequency` plus the entropy of the distribution in bits (NaN for no tags)."""
    freq = stats.tag_frequency(tags)
    freq["entropy_bits"] = entropy_bits(freq["counts"])
    return freq


def entropy_bits(counts: Sequence[int]) -> float:
    c = np.asarray(counts, np.float64)
    if c.sum() <= 0:
        return math.nan
    p = c[c > 0] / c.sum()
    return float(-(p * np.log2(p)).sum()) + 0.0  # + 0.0: one tag gives 0.0, not -0.0


def bias(decisions: Sequence[dict]) -> dict:
    """The LLM's top-1 candidate vs the tag chosen: both distributions, their total-variation
    distance (0: the chooser follows the top-1's distribution) and the share of decisions where
    the chosen tag is not the top-1."""
    top1 = tag_distribution([d["top1"] for d in decisions])
    chosen = tag_distribution([d["tag"] for d in decisions])
    n = len(decisions)
    tv = 0.5 * float(np.abs(np.asarray(top1["counts"]) - np.asarray(chosen["counts"])).sum()) / n if n else math.nan
    changed = 100.0 * float(np.mean([d["tag"] != d["top1"] for d in decisions])) if n else math.nan
    return {"n": n, "llm_top1": top1, "chosen": chosen, "tv_distance": tv, "not_top1_pct": changed}


def deduction_accuracy(decisions: Sequence[dict], *, n_boot: int, seed: int) -> dict:
    """Argmax deduction vs the true opponent class, and the same collapsed to the style, with
    95% CIs from a bootstrap over episodes (an episode's decisions are not independent)."""
    n = len(decisions)
    k = len(OPPONENT_CLASSES)
    confusion = np.zeros((k, k), np.int64)  # rows: truth, columns: deduced
    for d in decisions:
        confusion[d["truth"], d["deduced"]] += 1
    out: dict = {"n": n, "classes": list(OPPONENT_CLASSES), "confusion": confusion.tolist()}
    if n == 0:
        return out | {"class_pct": math.nan, "style_pct": math.nan, "class_ci95": [], "style_ci95": []}
    episodes = [d["episode"] for d in decisions]
    exact = [float(d["deduced"] == d["truth"]) for d in decisions]
    style = [float(CLASS_STYLE[d["deduced"]] == CLASS_STYLE[d["truth"]]) for d in decisions]
    for name, values, s in (("class", exact, seed), ("style", style, seed + 1)):
        mean, lo, hi = stats.cluster_bootstrap_mean(values, episodes, n_boot=n_boot, seed=s)
        out[f"{name}_pct"], out[f"{name}_ci95"] = 100 * mean, [100 * lo, 100 * hi]
    out["deduced"] = np.bincount([d["deduced"] for d in decisions], minlength=k).tolist()
    return out


def regret(priced: Sequence[dict], *, n_boot: int, seed: int) -> dict:
    """Mean regret and agreement with the oracle, CIs from a bootstrap over episodes (as B's)."""
    episodes = [d["episode"] for d in priced]
    r = stats.cluster_bootstrap_mean([d["regret"] for d in priced], episodes, n_boot=n_boot, seed=seed)
    a = stats.cluster_bootstrap_mean([float(d["agrees"]) for d in priced], episodes, n_boot=n_boot, seed=seed + 1)
    return {
        "decisions": len(priced),
        "mean_regret": r[0],
        "regret_ci95": list(r[1:]),
        "agreement_pct": 100 * a[0],
        "agreement_ci95": [100 * x for x in a[1:]],
    }


def versus_b(b_cell: dict, cell: dict, label: str, *, n_boot: int, seed: int) -> dict:
    """The label against B on the paired episodes: win-rate difference and Mann-Whitney U."""
    b, e = b_cell["episodes"], cell["episodes"]
    won, b_won = (np.asarray(x["outcome"]) == NPC_WIN for x in (e, b))
    diff, lo, hi = stats.paired_bootstrap_diff(won, b_won, n_boot=n_boot, seed=seed)
    mw = stats.mann_whitney(b["duration_s"], e["duration_s"])
    # Table 8's test with the label in B's place and B in A's: say so in its direction.
    mw["direction"] = mw["direction"].replace("B ", f"{label} ")
    return {"win_pct_points": 100 * diff, "ci95": [100 * lo, 100 * hi], "mann_whitney": mw}


def _outcomes(row: dict) -> dict:
    return {
        "win_pct": row["npc_win_pct"],
        "ci95": list(row["ci95"]["npc_win"]),
        "n": row["n"],
        "bot_win_pct": row["bot_win_pct"],
        "timeout_pct": row["timeout_pct"],
        "mean_s": row["mean_s"],
        "median_s": row["median_s"],
        "std_s": row["std_s"],
    }


def selector_summary(by: dict, descriptive: dict, config, variants: dict | None = None) -> dict:
    """The `selector` section of summary.json. `by`: label -> bot -> cell; `descriptive`: the
    summary's Tables 6-7 rows by label; `variants`: each C label's identity (`SelectorCells.identity`)."""
    labels = played_labels(config)
    n_boot, seed = config.n_boot, config.seed
    by_bot: dict = {}
    for bot in config.bots:
        b_cell = by.get("B", {}).get(bot)
        rows: dict = {}
        for label in [*(c for c in CONTEXT if c in config.combinations), *labels]:
            cell = by.get(label, {}).get(bot)
            if cell is None:
                continue
            entry = _outcomes(descriptive[label][bot])
            decisions = cell["decisions"]
            if label in labels:
                if b_cell is not None:
                    entry["vs_B"] = versus_b(b_cell, cell, label, n_boot=n_boot, seed=seed)
                entry["bias"] = bias(decisions)
                if cell["fingerprint"]["inputs"]["deduction"]:
                    entry["deduction"] = deduction_accuracy(decisions, n_boot=n_boot, seed=seed)
            if label == "B" or label in labels:
                entry["tags"] = tag_distribution([d["tag"] for d in decisions])
            priced = [d for d in decisions if "regret" in d]
            if priced:
                entry["regret"] = regret(priced, n_boot=n_boot, seed=seed)
            rows[label] = entry
        by_bot[bot] = rows
    # Where C's squad is not B's policy, "vs B" compares squad and tag source at once; say so.
    b_policy = {c["fingerprint"]["policy"] for c in by.get("B", {}).values()}
    other_squad = [
        label for label in labels if {c["fingerprint"]["policy"] for c in by.get(label, {}).values()} - b_policy
    ]
    return {
        "scenario": config.scenario,
        "labels": labels,
        "squad_differs_from_B": other_squad if b_policy else [],
        "variants": variants or {},
        "win": "squad (NPC) win %, with its percentile-bootstrap 95% CI (as in Tables 6-7)",
        "vs_B": "win % minus B's on the same paired episodes, in percentage points, 95% CI from a paired bootstrap "
        "over episodes; Mann-Whitney U of time-to-defeat, B vs the label (U is B's statistic, r and r_rb < 0 "
        "when the label's episodes are shorter)",
        "tags": "the tag chosen at each decision; entropy of that distribution in bits (2 = uniform over 4 tags)",
        "bias": "the LLM's first candidate (top-1) vs the tag chosen: their distributions, total-variation "
        "distance, and % of decisions whose chosen tag is not the top-1",
        "deduction": "argmax of the LLM's deduction vs the true opponent class at the decision (class), and "
        f"collapsed to the style {'/'.join(STYLES)} (style); 95% CIs from a bootstrap over episodes",
        "regret": "Q(best) - Q(chosen) in win probability over K oracle playouts per tag (priced cells only)",
        "by_bot": by_bot,
    }

"""Combination C's figures (matplotlib), drawn from the `selector` section of a run's summary.

- figC1_win_rates.png: squad win % per bot for A, B, O (where run), C and its
  ablations, with the 95% bootstrap CIs;
- figC2_tags.png: the tags chosen per bot, stacked bars for B, C and the ablations;
- figC3_llm_top1_vs_selector.png: per bot, the LLM's first candidate (top-1)
  beside the tags the selectors chose at the same decisions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from jaxarena.names import BOT_TYPES, NUM_TAGS, TAG_NAMES

TAG_COLORS = ("C0", "C3", "C2", "C7")


def _bots(section: dict) -> list[str]:
    return [b for b in BOT_TYPES if b in section["by_bot"]]


def _stacked(ax, bars: list[tuple[str, list[float]]], title: str) -> None:
    """One stacked bar of tag % per (name, pct); NaN (no decisions) drawn as nothing."""
    x = np.arange(len(bars))
    bottom = np.zeros(len(bars))
    for t in range(NUM_TAGS):
        vals = np.nan_to_num(np.array([pct[t] for _, pct in bars], np.float64))
        ax.bar(x, vals, bottom=bottom, color=TAG_COLORS[t], label=f"{t} {TAG_NAMES[t]}")
        bottom += vals
    ax.set_xticks(x, [name for name, _ in bars], rotation=60, ha="right", fontsize=8)
    ax.set(title=title, ylim=(0, 100))


def selector_figures(section: dict, save: Callable, plt) -> None:
    """Draws the three figures and hands each to `save(fig, file name)`."""
    bots = _bots(section)
    if not bots:
        return
    labels = list(dict.fromkeys(label for bot in bots for label in section["by_bot"][bot]))

    fig, ax = plt.subplots(figsize=(max(7.5, 0.35 * len(labels) * len(bots) + 2.5), 3.8))
    width = 0.8 / len(labels)
    for j, label in enumerate(labels):
        rows = [section["by_bot"][bot].get(label) for bot in bots]
        win = np.array([r["win_pct"] if r else np.nan for r in rows])
        lo = np.array([r["ci95"][0] if r else np.nan for r in rows])
        hi = np.array([r["ci95"][1] if r else np.nan for r in rows])
        pos = np.arange(len(bots)) + (j - (len(labels) - 1) / 2) * width
        ax.bar(pos, win, width, label=label, color=f"C{j % 10}")
        ax.errorbar(pos, win, yerr=[win - lo, hi - win], fmt="none", ecolor="k", lw=0.8, capsize=2)
    ax.set_xticks(range(len(bots)), [b.capitalize() for b in bots])
    ax.set(
        ylabel="squad win % (95% CI)",
        ylim=(0, 105),
        title=f"Combination C and its ablations — scenario {section['scenario']}",
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
    save(fig, "figC1_win_rates.png")

    tag_labels = [label for label in labels if any("tags" in section["by_bot"][b].get(label, {}) for b in bots)]
    if tag_labels:
        fig, axes = plt.subplots(1, len(bots), figsize=(0.55 * len(tag_labels) * len(bots) + 2.5, 3.6), squeeze=False)
        for ax, bot in zip(axes[0], bots, strict=True):
            rows = section["by_bot"][bot]
            _stacked(ax, [(lb, rows[lb]["tags"]["pct"]) for lb in tag_labels if "tags" in rows.get(lb, {})], bot)
        axes[0][0].set_ylabel("% of decisions")
        axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
        fig.suptitle("Tags chosen per bot: B (the LLM), C and its ablations", y=1.03)
        save(fig, "figC2_tags.png")

    variants = section.get("variants", {})
    chosen_by_selector = [
        label
        for label in section["labels"]
        if variants.get(label, {}).get("chooser", "selector") == "selector"
        and any("bias" in section["by_bot"][b].get(label, {}) for b in bots)
    ]
    if chosen_by_selector:
        fig, axes = plt.subplots(
            1, len(bots), figsize=(1.1 * len(chosen_by_selector) * len(bots) + 2.5, 3.6), squeeze=False
        )
        for ax, bot in zip(axes[0], bots, strict=True):
            bars = []
            for label in chosen_by_selector:
                b = section["by_bot"][bot].get(label, {}).get("bias")
                if b:
                    bars += [(f"{label}: LLM top-1", b["llm_top1"]["pct"]), (f"{label}: chosen", b["chosen"]["pct"])]
            _stacked(ax, bars, bot)
        axes[0][0].set_ylabel("% of decisions")
        axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
        fig.suptitle("The LLM's first candidate vs the selector's choice, at the same decisions", y=1.03)
        save(fig, "figC3_llm_top1_vs_selector.png")

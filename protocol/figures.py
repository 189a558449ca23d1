"""The report's figures (Figs. 5-9) as PNG files, with matplotlib (imported on first use, Agg backend).
The combinations' sections draw their own (`protocol.combinations.sections`; C's in `combinations.c.figures`).

Drawn from a run's summary (`summary.summarize`) and its cells; each file is
written atomically.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from jaxarena.files import write_atomic
from jaxarena.names import BOT_TYPES, DECISION_PERIOD_S, NUM_TAGS, TAG_NAMES

from .config import episode_sets
from .tables import format_p, summary_episode_s


def make_figures(run_dir: str | Path, summary: dict, cells: dict[str, dict]) -> list[str]:
    """Figs. 5-9 as PNG files in run_dir; returns their paths (those that apply to the run)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    by = defaultdict(dict)
    for c in cells.values():
        for label, episodes in episode_sets(c):
            by[label][c["bot"]] = np.asarray(episodes["duration_s"])
    paths = []

    def save(fig, name):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(str(write_atomic(run_dir / name, buf.getvalue())))

    episode_s = summary_episode_s(summary)
    bins = np.arange(0, episode_s + DECISION_PERIOD_S + 0.1, DECISION_PERIOD_S)
    for comb, num, fname in (("A", 5, "fig5_durations_A.png"), ("B", 6, "fig6_durations_B.png")):
        if comb not in by:
            continue
        bots = [b for b in BOT_TYPES if b in by[comb]]
        fig, axes = plt.subplots(1, len(bots), figsize=(4.2 * len(bots), 3.2), squeeze=False)
        for ax, bot in zip(axes[0], bots, strict=True):
            x = by[comb][bot]
            ax.hist(x, bins=bins, color="C0" if comb == "A" else "C1", alpha=0.8)
            ax.axvline(x.mean(), color="k", ls="--", label=f"mean {x.mean():.1f}")
            ax.axvline(np.median(x), color="k", ls="-", label=f"median {np.median(x):.1f}")
            ax.set(title=bot.capitalize(), xlabel="time-to-defeat (s)", ylabel="episodes")
            ax.legend(fontsize=8)
        fig.suptitle(f"Figure {num}. Combination {comb} time-to-defeat by bot type", y=1.04)
        save(fig, fname)

    desc = summary["descriptive"]
    groups = [(c, b) for c in ("A", "B") for b in BOT_TYPES if b in desc.get(c, {})]
    if groups:
        fig, ax = plt.subplots(figsize=(7.5, 3.6))
        labels = [f"{c}\n{b}" for c, b in groups]
        bottom = np.zeros(len(groups))
        for key, label, color in (
            ("npc_win_pct", "NPC win", "C2"),
            ("bot_win_pct", "bot win", "C3"),
            ("timeout_pct", "timeout", "C7"),
        ):
            vals = np.array([desc[c][b][key] for c, b in groups])
            ax.bar(labels, vals, bottom=bottom, label=label, color=color)
            bottom += vals
        ax.set(ylabel="% of episodes", title="Figure 7. Episode outcomes by combination and bot type")
        ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
        save(fig, "fig7_outcomes.png")

    mw = summary["mann_whitney"]
    if mw:
        bots = [b for b in BOT_TYPES if b in mw]
        fig, ax = plt.subplots(figsize=(7.5, 3.8))
        data, pos = [], []
        for i, bot in enumerate(bots):
            data += [by["A"][bot], by["B"][bot]]
            pos += [3 * i + 0.6, 3 * i + 1.4]
        parts = ax.boxplot(data, positions=pos, widths=0.7, patch_artist=True)
        for j, box in enumerate(parts["boxes"]):
            box.set_facecolor("C0" if j % 2 == 0 else "C1")
        for i, bot in enumerate(bots):
            m = mw[bot]
            stars = "" if m["stars"] == "ns" else m["stars"]
            ax.text(3 * i + 1, episode_s + 6, f"p={format_p(m['p'])}{stars}", ha="center", fontsize=9)
        ax.set_xticks([3 * i + 1 for i in range(len(bots))], [b.capitalize() for b in bots])
        ax.set(
            ylabel="time-to-defeat (s)",
            ylim=(0, episode_s + 15),
            title="Figure 8. A (blue) vs B (orange), Mann–Whitney U two-sided",
        )
        save(fig, "fig8_a_vs_b.png")

    by_bot = summary["tags"]["by_bot"]
    if by_bot:
        bots = [b for b in BOT_TYPES if b in by_bot]
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        width = 0.8 / len(bots)
        for j, bot in enumerate(bots):
            pct = [0.0 if math.isnan(p) else p for p in by_bot[bot]["pct"]]
            ax.bar(np.arange(NUM_TAGS) + (j - (len(bots) - 1) / 2) * width, pct, width, label=bot.capitalize())
        ax.set_xticks(range(NUM_TAGS), [f"{i} {n}" for i, n in enumerate(TAG_NAMES)])
        ax.set(ylabel="% of decisions", title="Figure 9. LLM tag selection frequency by bot type")
        ax.legend()
        save(fig, "fig9_tags.png")
    from .combinations import sections

    for section in sections():  # the combinations' own figures
        if summary.get(section.key) and section.figures is not None:
            section.figures(summary[section.key], save, plt)
    return paths

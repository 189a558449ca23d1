"""The selector's training curves: win rate per bot and the mean decision reward against decisions seen."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxarena.names import BOT_TYPES


def plot_curves(rows: list[dict], path: Path) -> Path | None:
    """Win rate per scripted bot and the mean decision reward against decisions seen."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def smooth(key, k=10):
        # Per-update rates are noisy (a few dozen episodes end per update): a trailing mean, NaN-aware.
        y = np.asarray([r.get(key, np.nan) for r in rows], float)
        seen = np.isfinite(y)
        sums, counts = np.cumsum(np.where(seen, y, 0.0)), np.cumsum(seen)
        lo = np.maximum(np.arange(len(y)) - k, -1)
        window_sum = sums - np.where(lo >= 0, sums[lo], 0.0)
        window_n = counts - np.where(lo >= 0, counts[lo], 0)
        return np.where(window_n > 0, window_sum / np.maximum(window_n, 1), np.nan)

    x = np.asarray([r["decisions"] for r in rows], float) / 1000.0
    fig, (ax_win, ax_reward) = plt.subplots(1, 2, figsize=(10, 3.6))
    for bot in BOT_TYPES + ("learned",):
        if np.any(np.isfinite([r.get(f"win_rate/{bot}", np.nan) for r in rows])):
            ax_win.plot(x, smooth(f"win_rate/{bot}"), label=bot if bot == "learned" else f"{bot} (+ variants)")
    ax_win.plot(x, smooth("win"), "k--", label="all members")
    ax_win.set(xlabel="decisions (thousands)", ylabel="squad win rate", ylim=(-0.02, 1.02), title="selector training")
    ax_win.legend(fontsize=8)
    ax_reward.plot(x, smooth("reward_mean"))
    ax_reward.set(xlabel="decisions (thousands)", ylabel="team reward per decision")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

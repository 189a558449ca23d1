"""How good a tag chooser is on priced decision states: regret, agreement with the oracle, entropy.

On M states with the oracle's win probabilities `win` (M, 4):

- regret: win[best] - win[chosen], the win probability a choice gives up;
- agreement: the share of states where the choice loses nothing (ties count);
- entropy: of the chooser's distribution, in bits (2 = uniform over 4 tags);
- tag shares: how often each tag is chosen.

The chooser's choice is the argmax of its probabilities: Table 10's
temperature 0.1 makes the drawn tag the argmax unless two options are within
a factor of about 1.25 (`graph_tags`).
"""

from __future__ import annotations

import numpy as np

from ..choice import entropy_bits


def choice_metrics(probs: np.ndarray, win: np.ndarray) -> dict:
    """Regret, agreement, entropy and tag shares of choosing argmax `probs` (M, 4) on values `win` (M, 4)."""
    probs, win = np.asarray(probs, np.float64), np.asarray(win, np.float64)
    chosen = np.argmax(probs, axis=-1)
    regret = win.max(-1) - win[np.arange(len(win)), chosen]
    return {
        "regret": float(regret.mean()),
        "agreement": float(np.mean(regret <= 0.0)),
        "entropy_bits": float(entropy_bits(probs).mean()),
        "tag_shares": np.bincount(chosen, minlength=4).astype(float) / max(len(chosen), 1),
        "expected_win": float(win[np.arange(len(win)), chosen].mean()),
        "oracle_win": float(win.max(-1).mean()),
    }


def by_group(probs: np.ndarray, win: np.ndarray, groups: np.ndarray, names) -> dict:
    """`choice_metrics` per group (e.g. per bot), keyed by name; groups with no rows are left out."""
    return {
        name: choice_metrics(probs[groups == i], win[groups == i])
        for i, name in enumerate(names)
        if np.any(groups == i)
    }

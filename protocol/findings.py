"""Which of the paper's A-vs-B findings a run reproduces, said in plain words.

The paper makes two findings per bot about B (the LLM's tags) against A (the policy alone):
- how B moved the squad's win rate (Tables 6 and 7: +0, +3 and +13 points against the aggressive,
  evasive and balanced bots); only the balanced bot's gain is one its own n = 100 can tell from zero;
- whether B's episodes were shorter or longer (Table 8's Mann-Whitney test: shorter, shorter, longer,
  all at p < 0.05).

A finding *reproduces* when our run moves the same way: a win-rate change whose paired 95% CI lies on
the paper's side of zero (or spans zero where the paper's does), and an episode length that differs in
the paper's direction at p < 0.05 (or not at all where the paper's did not).
"""

from __future__ import annotations

import math

import numpy as np

from jaxarena.names import BOT_TYPES, NPC_WIN

from . import stats
from .tables import PAPER_TABLE6, PAPER_TABLE7, PAPER_TABLE8

#: The paper's episodes per bot and combination.
PAPER_N = 100
_Z95 = 1.959964


def paper_win_change(bot: str) -> dict:
    """The paper's B − A NPC win points against `bot`, with a 95% Wald interval of two independent
    proportions at n = 100 each (its A and B episodes were not paired), and its direction."""
    a, b = PAPER_TABLE6[bot][3] / 100, PAPER_TABLE7[bot][3] / 100
    half = _Z95 * math.sqrt(a * (1 - a) / PAPER_N + b * (1 - b) / PAPER_N)
    lo, hi = b - a - half, b - a + half
    return {"points": 100 * (b - a), "ci95": [100 * lo, 100 * hi], "direction": _sign(lo, hi)}


def _sign(lo: float, hi: float) -> str:
    """ "up" or "down" where a 95% interval excludes zero, else "none"."""
    return "up" if lo > 0 else "down" if hi < 0 else "none"


def _length(r_rb: float, p: float) -> str:
    """ "shorter" or "longer" (B's episodes against A's) at p < 0.05, else "none"."""
    if p >= 0.05:
        return "none"
    return "shorter" if r_rb < 0 else "longer"


def findings(by: dict, mann_whitney: dict, n_boot: int, seed: int) -> dict:
    """Per bot that both A and B played: the paper's and our win change and episode-length direction, and
    whether each reproduces. `by`: combination -> bot -> cell (A's and B's episodes are paired);
    `mann_whitney`: bot -> the run's Table 8 test of A's and B's durations (`stats.mann_whitney`)."""
    out = {}
    for bot in BOT_TYPES:
        a, b = by.get("A", {}).get(bot), by.get("B", {}).get(bot)
        if a is None or b is None:
            continue
        a_won, b_won = (np.asarray(c["episodes"]["outcome"]) == NPC_WIN for c in (a, b))
        diff, lo, hi = stats.paired_bootstrap_diff(b_won, a_won, n_boot=n_boot, seed=seed)
        win = {"points": 100 * diff, "ci95": [100 * lo, 100 * hi], "direction": _sign(lo, hi)}
        win["a_pct"] = 100 * float(np.mean(a_won))
        mw = mann_whitney[bot]
        length = {"r_rb": mw["r_rb"], "p": mw["p"], "direction": _length(mw["r_rb"], mw["p"])}
        _, p, _, r_rb, _ = PAPER_TABLE8[bot]
        paper_win = paper_win_change(bot)
        paper_length = {"r_rb": r_rb, "p": p, "direction": _length(r_rb, p)}
        out[bot] = {
            "win": {"ours": win, "paper": paper_win, "reproduced": win["direction"] == paper_win["direction"]},
            "length": {
                "ours": length,
                "paper": paper_length,
                "reproduced": length["direction"] == paper_length["direction"],
            },
        }
    return out

"""Which of the paper's A-vs-B findings a run reproduces: the paper's own directions, and ours from cells."""

from __future__ import annotations

import numpy as np
import pytest

from jaxarena.names import BOT_WIN, NPC_WIN, TIMEOUT
from jaxarena.protocol import stats
from jaxarena.protocol.findings import findings, paper_win_change
from jaxarena.protocol.tables import findings_paragraph


def test_the_papers_win_changes_only_the_balanced_gain_is_told_from_zero():
    # Tables 6 and 7: 8 -> 8, 90 -> 93, 11 -> 24 NPC wins in 100 episodes each.
    changes = {bot: paper_win_change(bot) for bot in ("aggressive", "evasive", "balanced")}
    assert [c["points"] for c in changes.values()] == pytest.approx([0.0, 3.0, 13.0])
    assert [c["direction"] for c in changes.values()] == ["none", "none", "up"]
    lo, hi = changes["balanced"]["ci95"]
    assert 0 < lo < 13 < hi  # a Wald interval of two independent proportions at n = 100


def _findings(by, n_boot):
    """`findings` with the run's Table 8 test of each bot A and B both played, as the summary computes it."""
    both = set(by.get("A", {})) & set(by.get("B", {}))
    tests = {
        b: stats.mann_whitney(by["A"][b]["episodes"]["duration_s"], by["B"][b]["episodes"]["duration_s"]) for b in both
    }
    return findings(by, tests, n_boot=n_boot, seed=0)


def _cell(outcome, duration):
    return {"episodes": {"outcome": np.asarray(outcome), "duration_s": np.asarray(duration, dtype=float)}}


def test_a_run_whose_b_wins_more_and_sooner_reproduces_what_moves_that_way():
    n = 200
    rng = np.random.default_rng(0)
    a_lose = _cell(np.full(n, BOT_WIN), 60 + rng.uniform(0, 10, n))
    b_win = _cell(np.full(n, NPC_WIN), 30 + rng.uniform(0, 10, n))  # B wins every paired episode, sooner
    same = _cell(np.r_[np.full(n // 2, NPC_WIN), np.full(n // 2, TIMEOUT)], rng.uniform(50, 120, n))
    by = {"A": {"aggressive": a_lose, "balanced": a_lose, "evasive": same}, "B": {"aggressive": b_win}}
    by["B"].update(balanced=b_win, evasive=same)
    found = _findings(by, 500)
    assert list(found) == ["aggressive", "evasive", "balanced"]
    for bot in ("aggressive", "balanced"):
        ours = found[bot]["win"]["ours"]
        assert ours["points"] == pytest.approx(100.0) and ours["direction"] == "up"
        assert found[bot]["length"]["ours"]["direction"] == "shorter" and found[bot]["length"]["ours"]["r_rb"] < 0
    # The paper's aggressive B won no more often but ended sooner; its balanced B won more but lasted longer.
    assert (found["aggressive"]["win"]["reproduced"], found["aggressive"]["length"]["reproduced"]) == (False, True)
    assert (found["balanced"]["win"]["reproduced"], found["balanced"]["length"]["reproduced"]) == (True, False)
    # Identical cells: no change either way; the paper's evasive B won as often (reproduced), ended sooner (not).
    assert found["evasive"]["win"]["ours"]["ci95"] == [0.0, 0.0]
    assert (found["evasive"]["win"]["reproduced"], found["evasive"]["length"]["reproduced"]) == (True, False)

    text = "\n".join(findings_paragraph(found))
    assert text.startswith("**What reproduced.** Of the paper's 6 findings about B against A on these bots, 3 ")
    assert "here B won more often than A (+100.0 points, paired 95% CI +100.0 to +100.0): reproduced" in text
    assert "in the paper B won neither more nor less often than A, as far as its CI tells (+0.0 points" in text
    assert "with A at" not in text  # A won half its evasive episodes: room either way


def test_a_squad_that_always_wins_is_said_to_leave_no_room():
    won = _cell(np.full(50, NPC_WIN), np.full(50, 5.0))
    found = _findings({"A": {"aggressive": won}, "B": {"aggressive": won}}, 100)
    (bullet,) = findings_paragraph(found)[2:-1]
    assert "(+0.0 points, paired 95% CI +0.0 to +0.0), with A at 100%, where B had no room to win more" in bullet


def test_a_bot_only_one_combination_played_has_no_finding():
    cell = _cell([NPC_WIN, BOT_WIN], [10.0, 20.0])
    assert _findings({"A": {"aggressive": cell}, "B": {"evasive": cell}}, 100) == {}
    assert findings_paragraph({}) == []

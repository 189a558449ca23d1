"""The calibration study: its figures and checks against the paper's A row, and a tiny grid end to end."""

import json

import numpy as np
import pytest
from calibrate_arena import main, outcome_figures, paper_targets, score

from jaxarena.names import BOT_TYPES, BOT_WIN, NPC_WIN, TIMEOUT
from jaxarena.protocol.tables import PAPER_TABLE6


def _episodes(npc: int, bot: int, timeout: int, mean_s: float):
    """100 episodes with these outcome counts, the ended ones lasting `mean_s` on average with the timeouts."""
    outcome = np.array([NPC_WIN] * npc + [BOT_WIN] * bot + [TIMEOUT] * timeout)
    ended = npc + bot
    length = (100 * mean_s - 120.0 * timeout) / max(ended, 1)
    return outcome, np.where(outcome == TIMEOUT, 120.0, length)


def test_the_paper_row_itself_passes_every_check_and_a_winning_squad_fails_them():
    targets = paper_targets()
    assert targets["balanced"]["timeout"]["lo"] == pytest.approx(50.2, abs=0.05)  # notes/paper-table6.md
    assert targets["aggressive"]["npc_win"]["hi"] == pytest.approx(15.0, abs=0.05)
    paper = {}
    for bot in BOT_TYPES:
        mean, _, _, npc, lost, timeout = PAPER_TABLE6[bot]
        paper[bot] = outcome_figures(*_episodes(round(npc), round(lost), round(timeout), mean))
    assert paper["balanced"]["mean_s"] == pytest.approx(104.08)
    result = score(paper, targets)
    assert result == {"passed": 12, "misses": [], "distance": pytest.approx(0.0, abs=1e-6)}
    # The paper's arena as our squad plays it: every bot beaten in seconds.
    ours = {bot: outcome_figures(*_episodes(100, 0, 0, 6.0)) for bot in BOT_TYPES}
    result = score(ours, targets)
    # Even the evasive bot's: 100% NPC wins lie above [82.6, 94.5], 0% bot wins below [0.2, 5.4].
    assert result["passed"] == 0
    assert "evasive npc_win" in result["misses"] and "balanced mean" in result["misses"]


def test_a_bad_grid_is_refused_before_anything_trains(tmp_path, capsys):
    for grid, says in (("lr=1e-4,3e-4", "arena knobs only"), ("arena.bot_hp=300,x", "finite number")):
        with pytest.raises(SystemExit) as stop:
            main(["--grid", grid, "--out", str(tmp_path / "out")])
        assert stop.value.code == 2 and says in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # a two-point grid of tiny runs trained in one program, then 4 episodes per bot each (~1 min)
def test_a_tiny_grid_trains_in_one_program_and_scores_each_point(tmp_path):
    tiny = ["num_envs=6", "num_steps=8", "hidden=8", "update_epochs=1", "num_minibatches=2"]
    argv = ["--grid", "arena.bot_hp=300,3000", "--seeds", "1", "--seed", "7", "--total-steps", "96"]
    argv += ["--episodes", "4", "--set", *tiny, "--out", str(tmp_path)]
    assert main(argv) == 0
    record = json.loads((tmp_path / "calibrate_arena.json").read_text())
    assert {p["setting"] for p in record["points"]} == {"arena.bot_hp=300", "arena.bot_hp=3000"}
    for point in record["points"]:
        assert set(point["figures"]) == set(BOT_TYPES) and point["figures"]["evasive"]["n"] == 4
        assert 0 <= point["passed"] <= 12 and point["seeds"] == [7]
    # A bot of 3000 HP outlasts 4 untrained squads' two minutes where one of 300 HP may not.
    strong = next(p for p in record["points"] if p["setting"] == "arena.bot_hp=3000")
    assert all(strong["figures"][bot]["npc_win"]["pct"] == 0.0 for bot in BOT_TYPES)
    for run in record["runs"]:  # each run's own figures, 4 episodes per bot
        assert {b: run["figures"][b]["n"] for b in BOT_TYPES} == dict.fromkeys(BOT_TYPES, 4)
    assert (tmp_path / "calibrate_arena.png").stat().st_size > 0
    assert "| paper (Table 6) | 12 |" in (tmp_path / "calibrate_arena.md").read_text()

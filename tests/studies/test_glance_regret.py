"""A glance table's regret: its one-answer neighbours played on paired episodes, the best one confirmed elsewhere."""

import chex
import numpy as np
import pytest
from glance_regret import (
    STOCK,
    _change_cell,
    markdown,
    measure,
    neighbours,
    run_glance_regret,
    table_regret,
    visited_cells,
)

from jaxarena.llm.glance import AGGRESSIVE, GLANCE_PERIOD_S, NUM_GLANCE_CELLS, glance_source, initial_carry
from jaxarena.llm.tuning.glance_report import initials, play_tables
from jaxarena.llm.tuning.paired_play import squad_runner
from jaxarena.names import BOT_WIN, NPC_WIN, NUM_TAGS, TAG_NAMES


def test_neighbours_change_one_answer_in_each_given_cell_to_every_other_tag():
    table = np.full(NUM_GLANCE_CELLS, AGGRESSIVE, np.int32)
    table[4] = 3
    changes = neighbours(table, [4, 9])
    assert [(c, t) for c, t, _ in changes] == [(4, 0), (4, 1), (4, 2), (9, 0), (9, 2), (9, 3)]
    for cell, tag, changed in changes:
        differs = np.flatnonzero(changed != table)
        assert differs.tolist() == [cell] and changed[cell] == tag
    assert table[4] == 3 and table[9] == AGGRESSIVE  # the table itself is left as it was


def test_a_change_in_a_cell_the_games_never_glance_in_plays_the_same_episodes():
    """Why only visited cells are played: a change elsewhere cannot move a single episode."""
    episodes = 8
    run = squad_runner(
        "raid", "B-obey-raid", episodes, ("aggressive",), glance_source(), decision_period_s=GLANCE_PERIOD_S
    )
    table = np.full(NUM_GLANCE_CELLS, AGGRESSIVE, np.int32)
    own = run("aggressive", 0, initial_carry(table, episodes))
    shares = visited_cells(own)
    assert shares and sum(shares.values()) == pytest.approx(1.0)
    unvisited = next(c for c in range(NUM_GLANCE_CELLS) if c not in shares)
    changed = table.copy()
    changed[unvisited] = 3
    other = run("aggressive", 0, initial_carry(changed, episodes))
    chex.assert_trees_all_equal(own.outcome, other.outcome)
    chex.assert_trees_all_equal(own.duration_s, other.duration_s)


def test_regret_confirms_the_best_change_on_other_keys_as_glance_play_measures_it(tmp_path):
    import json

    episodes, bots = 16, ("aggressive", "evasive")
    retreat_early = "AAAAAAAARAAAAAAAAA"
    result = run_glance_regret(
        out=tmp_path,
        tables=[retreat_early],
        scenario="raid",
        policy_spec="B-obey-raid",
        bots=bots,
        episodes=episodes,
        seed=0,
        confirm_seed=1,
        n_boot=200,
    )
    assert list(result["readers"]) == [STOCK, retreat_early]
    stock = result["readers"][STOCK]
    against = stock["bots"]["aggressive"]
    assert against["changes_played"] == (NUM_TAGS - 1) * len(against["visited_cells"])
    change = against["best_change"]
    assert change is not None and change["selection_gain_pct"] > 0  # always Aggressive leaves a gain on raid

    def confirmed(change, bots):
        """glance-play's paired difference of the changed table from the stock one on seed 1, pooled over bots."""
        changed = np.full(NUM_GLANCE_CELLS, AGGRESSIVE, np.int32)
        changed[change["cell"]] = TAG_NAMES.index(change["to"])
        _, wins = play_tables("raid", "B-obey-raid", bots, {"changed": changed}, episodes=episodes, seed=1, n_boot=200)
        return 100 * float(np.mean([wins["changed"][bot] - wins[STOCK][bot] for bot in bots]))

    # The confirmed gain is what glance-play finds when it plays the changed table on the confirming keys.
    assert change["confirmed_gain_pct"][0] == pytest.approx(confirmed(change, ("aggressive",)))
    assert against["regret_pct"] == pytest.approx(max(0.0, change["confirmed_gain_pct"][0]))
    blind = stock["bot_blind"]
    assert blind["best_change"] is not None  # one change for both bots, confirmed against both
    assert blind["best_change"]["confirmed_gain_pct"][0] == pytest.approx(confirmed(blind["best_change"], bots))
    for row in result["readers"].values():
        assert row["mean_regret_pct"] == pytest.approx(np.mean([row["bots"][b]["regret_pct"] for b in bots]))
        assert row["bot_blind"]["regret_pct"] >= 0
    tuned = result["readers"][retreat_early]
    assert tuned["mean_regret_over_stock"] == pytest.approx(tuned["mean_regret_pct"] / stock["mean_regret_pct"])
    assert json.loads((tmp_path / "glance_regret.json").read_text()) == json.loads(json.dumps(result))
    assert (tmp_path / "glance_regret.md").read_text() == markdown(result) == markdown(json.loads(json.dumps(result)))


def test_the_confirming_keys_must_differ_from_the_selection_keys():
    with pytest.raises(ValueError, match="other keys than the selection"):
        measure(
            [], scenario="raid", policy_spec="B-obey-raid", bots=("aggressive",), episodes=4, seed=2, confirm_seed=2
        )


class Played:
    """What `table_regret` reads of a rollout: outcomes, and the cell of each decision made."""

    def __init__(self, wins, cells):
        self.outcome = np.where(np.asarray(wins, bool), NPC_WIN, BOT_WIN).astype(np.int32)
        self.decision_aux = np.asarray(cells, np.int32)[:, None].repeat(len(wins), axis=1)
        self.decision_active = np.ones_like(self.decision_aux, bool)


def test_bot_blind_regret_averages_over_bots_and_passes_over_a_trade():
    """A scripted game, for the bookkeeping alone: against the aggressive bot answering Retreat in cell 3 wins every
    episode (a trade: against the evasive bot it loses them all); Flank in cell 5, a cell only the evasive bot's
    games reach, wins half of its episodes more. Every other table wins half of its episodes."""
    n = 8
    calls = []

    def play(bot, seed, table):
        calls.append((bot, seed, initials(table)))
        half = np.arange(n) % 2
        if table[3] == TAG_NAMES.index("Retreat"):
            return Played(np.ones(n) if bot == "aggressive" else np.zeros(n), [3])
        if bot == "evasive" and table[5] == TAG_NAMES.index("Flank"):
            return Played(np.ones(n), [3, 5])
        return Played(half, [3] if bot == "aggressive" else [3, 5])

    table = np.full(NUM_GLANCE_CELLS, AGGRESSIVE, np.int32)
    row = table_regret(play, table, ("aggressive", "evasive"), seed=0, confirm_seed=1, n_boot=100, progress=lambda _: 0)
    aggressive, evasive = row["bots"]["aggressive"], row["bots"]["evasive"]
    assert aggressive["changes_played"] == 3 and evasive["changes_played"] == 6  # cell 5 is the evasive bot's alone
    assert aggressive["visited_cells"] == [[3, 1.0]] and evasive["visited_cells"] == [[3, 0.5], [5, 0.5]]
    assert (aggressive["best_change"]["cell"], aggressive["best_change"]["to"], aggressive["regret_pct"]) == (
        3,
        "Retreat",
        50.0,
    )
    assert (evasive["best_change"]["cell"], evasive["best_change"]["to"], evasive["regret_pct"]) == (5, "Flank", 50.0)
    # Bot-blind: Retreat in cell 3 gains (+50 - 50) / 2 = 0, Flank in cell 5 (0 + 50) / 2 = +25: no trade taken.
    blind = row["bot_blind"]
    assert (blind["best_change"]["cell"], blind["best_change"]["to"]) == (5, "Flank")
    assert blind["best_change"]["selection_gain_pct"] == 25.0 and blind["regret_pct"] == 25.0
    assert row["mean_regret_pct"] == 50.0
    # Each best change is confirmed on seed 1's keys, beside the table, against the bots it is the best for.
    confirming = [c for c in calls if c[1] == 1]
    flank = "AAAAAFAAAAAAAAAAAA"
    assert (("aggressive", 1, flank) in confirming) and (("evasive", 1, flank) in confirming)
    retreat = "AAARAAAAAAAAAAAAAA"
    assert ("aggressive", 1, retreat) in confirming and ("evasive", 1, retreat) not in confirming
    # The table itself is played once per bot on those keys, for the per-bot and the bot-blind confirmation alike.
    assert [confirming.count((bot, 1, "A" * NUM_GLANCE_CELLS)) for bot in ("aggressive", "evasive")] == [1, 1]


def test_a_table_with_no_gaining_change_has_no_regret_and_nothing_is_confirmed():
    calls = []

    def play(bot, seed, table):
        calls.append(seed)
        return Played(np.arange(4) % 2, [2])  # every table wins the same episodes

    row = table_regret(
        play,
        np.full(NUM_GLANCE_CELLS, AGGRESSIVE, np.int32),
        ("balanced",),
        seed=0,
        confirm_seed=1,
        n_boot=10,
        progress=lambda _: 0,
    )
    assert row["bots"]["balanced"]["best_change"] is None and row["bots"]["balanced"]["regret_pct"] == 0.0
    assert row["bot_blind"] == {"best_change": None, "regret_pct": 0.0} and 1 not in calls
    assert _change_cell(row["bots"]["balanced"]).endswith("no change gains")

"""A glance table's regret: its one-answer neighbours played on paired episodes, the best one confirmed elsewhere."""

import chex
import numpy as np
import pytest

from jaxarena.llm.glance import AGGRESSIVE, GLANCE_PERIOD_S, NUM_GLANCE_CELLS, glance_source, initial_carry
from jaxarena.llm.tuning.glance_regret import STOCK, markdown, measure, neighbours, run_glance_regret, visited_cells
from jaxarena.llm.tuning.glance_report import play_tables
from jaxarena.llm.tuning.history_bound import squad_runner
from jaxarena.names import NUM_TAGS, TAG_NAMES


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
    assert (tmp_path / "glance_regret.md").read_text() == markdown(result)


def test_the_confirming_keys_must_differ_from_the_selection_keys():
    with pytest.raises(ValueError, match="other keys than the selection"):
        measure(
            [], scenario="raid", policy_spec="B-obey-raid", bots=("aggressive",), episodes=4, seed=2, confirm_seed=2
        )

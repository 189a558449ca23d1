"""Glance tables played beside always Aggressive: tables from tag initials, paired episodes."""

import numpy as np
import pytest
from glance_play import markdown, run_glance_play

from jaxarena.llm.glance import NUM_GLANCE_CELLS
from jaxarena.llm.tuning.glance_report import INITIALS, initials, parse_table


def test_a_table_is_read_from_its_tag_initials_and_a_mistyped_one_is_refused():
    assert INITIALS == "SAFR"
    table = parse_table("aaaaaaaaaaaaaarfaf")
    assert table.dtype == np.int32 and table.shape == (NUM_GLANCE_CELLS,)
    assert table[14] == 3 and table[15] == 2 and table[17] == 2 and set(table[:14]) == {1}
    assert initials(table) == "AAAAAAAAAAAAAARFAF"
    with pytest.raises(ValueError, match="18 tag initials"):
        parse_table("AAAR")
    with pytest.raises(ValueError, match="'AAAAAAAAAAAAAARFAG' has G"):  # a typo is named, not looked up as an adapter
        parse_table("AAAAAAAAAAAAAARFAG")


def test_tables_play_paired_with_always_aggressive_and_each_plays_its_own_answers(tmp_path):
    import json

    result = run_glance_play(
        out=tmp_path,
        tables=["A" * NUM_GLANCE_CELLS, "R" * NUM_GLANCE_CELLS],
        scenario="raid",
        policy_spec="B-obey-raid",
        bots=("aggressive",),
        episodes=16,
        seed=0,
        n_boot=200,
    )
    rows = result["readers"]
    assert list(rows) == ["always Aggressive", "A" * NUM_GLANCE_CELLS, "R" * NUM_GLANCE_CELLS]
    same, retreat = rows["A" * NUM_GLANCE_CELLS]["aggressive"], rows["R" * NUM_GLANCE_CELLS]["aggressive"]
    # The same answers on the same keys play the same episodes: a difference of exactly zero.
    assert same["minus_always_aggressive"] == [0.0, 0.0, 0.0]
    assert same["win_pct"] == rows["always Aggressive"]["aggressive"]["win_pct"]
    assert retreat["tag_shares"]["Retreat"] == 1.0 and same["tag_shares"]["Aggressive"] == 1.0
    d = retreat["minus_always_aggressive"]
    assert d[1] <= d[0] <= d[2]
    assert f"| {'R' * NUM_GLANCE_CELLS} | {'R' * NUM_GLANCE_CELLS} |" in markdown(result)
    assert json.loads((tmp_path / "glance_play.json").read_text()) == result  # and the run keeps what it printed
    assert (tmp_path / "glance_play.md").read_text() == markdown(result)


def test_versus_gives_each_tables_paired_difference_from_the_named_one(tmp_path):
    aggressive, retreat = "A" * NUM_GLANCE_CELLS, "R" * NUM_GLANCE_CELLS
    kwargs = dict(scenario="raid", policy_spec="B-obey-raid", bots=("aggressive",), episodes=16, seed=0, n_boot=200)
    result = run_glance_play(out=tmp_path, tables=[retreat, aggressive], versus=aggressive, **kwargs)
    rows = result["readers"]
    # Against a table that answers as always Aggressive, a difference is the one from always Aggressive.
    assert rows[retreat]["aggressive"]["minus_versus"] == rows[retreat]["aggressive"]["minus_always_aggressive"]
    assert rows[aggressive]["aggressive"]["minus_versus"] == [0.0, 0.0, 0.0]
    assert rows[retreat]["aggressive"]["minus_versus"] != [0.0, 0.0, 0.0]  # Retreat throughout plays another game
    assert f"Minus `{aggressive}`" in markdown(result) and "minus_versus" not in rows["always Aggressive"]["aggressive"]
    with pytest.raises(ValueError, match="--versus names one of the tables"):
        run_glance_play(out=tmp_path, tables=[retreat], versus=aggressive, **kwargs)

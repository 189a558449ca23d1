"""The richer prompt's bound: history cells, the table tag source in a rollout, and the search's acceptance rule."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from history_bound import (
    AGGRESSIVE,
    FIRST,
    NUM_CELLS,
    cell_names,
    decision_cell,
    held_out_report,
    initial_carry,
    markdown,
    search,
    table_source,
)

import jaxarena
from jaxarena.llm.history import APPROACH, HISTORY_LEN, NEAREST, NUM_POINT_FEATURES, DecisionHistory, push
from jaxarena.names import TAG_NAMES
from jaxarena.runner import make_runner

RETREAT, FLANK = TAG_NAMES.index("Retreat"), TAG_NAMES.index("Flank")


def history_with(nearest: float, approach: float, seen: int) -> DecisionHistory:
    points = np.zeros((HISTORY_LEN, NUM_POINT_FEATURES), np.float32)
    points[-1, NEAREST], points[-1, APPROACH] = nearest, approach
    valid = np.arange(HISTORY_LEN) >= HISTORY_LEN - seen
    return DecisionHistory(jnp.asarray(points), jnp.asarray(valid), jnp.zeros(2), jnp.zeros(2))


@pytest.mark.parametrize(
    ("nearest", "approach", "seen", "cell"),
    [
        (20.0, 0.0, 1, FIRST),  # one point seen: no movement yet
        (2.0, -0.5, 2, 0),  # close, moved away
        (7.0, 0.0, 3, 4),  # mid, held
        (15.0, -0.9, 2, 6),  # far, moved away
        (15.0, 0.9, 2, 8),  # far, moved toward
        (4.0, 0.2, 2, 5),  # a distance edge starts the farther bin; +0.2 is "moved toward"
        (15.0, -0.2, 2, 6),  # -0.2 is "moved away", as the deduction prompt bins it
    ],
)
def test_a_decision_falls_in_the_cell_of_its_distance_and_approach(nearest, approach, seen, cell):
    got = decision_cell(history_with(nearest, approach, seen))
    chex.assert_shape(got, ())
    assert int(got) == cell, cell_names()[int(got)]


def test_a_table_must_name_a_tag_for_every_cell():
    with pytest.raises(ValueError, match="history table has 10 tags"):
        initial_carry([AGGRESSIVE] * (NUM_CELLS - 1), 4)
    with pytest.raises(ValueError, match="in 0..3"):
        initial_carry([4] * NUM_CELLS, 4)


def test_the_table_source_answers_each_decision_with_its_cells_tag_in_a_rollout():
    env, params = jaxarena.make("Arena-v0", bot="aggressive")
    table = [(c + 2) % 4 for c in range(NUM_CELLS)]  # a different tag for neighbouring cells
    episodes, periods = 3, 4
    run = make_runner(
        env,
        params,
        lambda p, o, k: jnp.zeros(5, jnp.int32),
        table_source(),
        episodes,
        num_periods=periods,
        record_states=True,
    )
    result = run(None, params, jax.random.key(0), tag_state=initial_carry(table, episodes))
    tags = np.asarray(result.decision_tags)
    chex.assert_shape(tags, (periods, episodes))
    # The same cells, pushed on the host from the recorded decision states, give the same tags.
    for n in range(episodes):
        history = DecisionHistory(
            jnp.zeros((HISTORY_LEN, NUM_POINT_FEATURES)), jnp.zeros(HISTORY_LEN, bool), jnp.zeros(2), jnp.zeros(2)
        )
        for p in range(periods):
            state = jax.tree.map(lambda x, p=p, n=n: x[p, n], result.decision_states)
            history = push(history, state, params)
            assert tags[p, n] == table[int(decision_cell(history))]
    assert np.all(tags[0] == table[FIRST])


def synthetic_play(table, seed):
    """A game where Flank far from a fleeing bot (cell 6) gains 10 points against the balanced bot at a
    1-point cost against the evasive one, and a first-decision Retreat gains 20 against the aggressive
    bot at a 5-point cost against the evasive one: more in sum, but bought by giving up a bot."""
    n = 100
    rates = {"aggressive": 0.40, "evasive": 0.70, "balanced": 0.20}
    if table[6] == FLANK:
        rates["balanced"] += 0.10
        rates["evasive"] -= 0.01
    if table[FIRST] == RETREAT:
        rates["aggressive"] += 0.20
        rates["evasive"] -= 0.05
    return {bot: (np.arange(n) < round(r * n)).astype(np.float64) for bot, r in rates.items()}


def test_search_keeps_a_gain_that_costs_no_bot_much_and_refuses_one_bought_by_giving_up_a_bot():
    messages = []
    table, rates = search(synthetic_play, seed=1, progress=messages.append)
    assert table[6] == FLANK
    assert table[FIRST] == AGGRESSIVE  # +20 against the aggressive bot for -5 against the evasive one
    assert rates == pytest.approx({"aggressive": 0.40, "evasive": 0.69, "balanced": 0.30})
    assert any("-> Flank" in m for m in messages)
    # The same search with no limit on a bot's loss buys the gain.
    unlimited, _ = search(synthetic_play, seed=1, max_loss=1.0, progress=messages.append)
    assert unlimited[FIRST] == RETREAT


def test_the_held_out_report_gives_paired_differences_from_always_aggressive_and_each_first_decision():
    table = [AGGRESSIVE] * NUM_CELLS
    table[6] = FLANK
    report = held_out_report(synthetic_play, table, seed=0, n_boot=500)
    searched = report["searched table"]["bots"]
    assert searched["balanced"]["minus_always_aggressive"][0] == pytest.approx(10.0)
    first_retreat = report["searched table, first decision Retreat"]["bots"]
    assert first_retreat["aggressive"]["minus_always_aggressive"][0] == pytest.approx(20.0)
    assert first_retreat["evasive"]["minus_always_aggressive"][0] == pytest.approx(-6.0)
    assert "searched table, first decision Aggressive" not in report  # that is the searched table itself
    text = markdown(
        {
            "scenario": "raid",
            "policy": "B-obey-raid",
            "search_episodes": 100,
            "search_seed": 1,
            "episodes": 100,
            "seed": 0,
            "table": table,
            "bots": list(searched),
            "held_out": report,
        }
    )
    assert "nearest >= 10 u, the bot moved away from the squad -> Flank" in text
    assert "| searched table, first decision Retreat | 60% (+20.0" in text


def test_the_command_refuses_an_empty_episode_count_in_one_line(tmp_path, capsys):
    from history_bound import main

    for flag in ("--episodes", "--search-episodes"):
        assert main([flag, "0", "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"history_bound.py: error: {flag} must be at least 1, got 0"
    assert not any(tmp_path.iterdir())


def test_an_interrupted_study_says_so_without_a_traceback_or_a_resume_hint(tmp_path, capsys, monkeypatch):
    import history_bound

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(history_bound, "run_history_bound", interrupted)  # writes only at the end: nothing to resume
    assert history_bound.main(["--out", str(tmp_path)]) == 130
    assert capsys.readouterr().err == "history_bound.py: interrupted\n"

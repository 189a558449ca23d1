"""Candidates: state quantisation, the candidate prompts, vanilla top-3 and iterative dedup."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.llm.candidates import (
    NO_ASSESSMENT,
    NUM_CANDIDATE_CELLS,
    NUM_STATE_CELLS,
    candidate_cell,
    candidate_prompt,
    cell_features,
    dedup,
    iterative_prompt,
    state_cell,
    vanilla_candidates,
)
from jaxarena.llm.deduction import OPPONENT_LABELS
from jaxarena.llm.prompt import SYSTEM, format_state

PAPER = jaxarena.make("Arena-v0")[1]
HEADROOM = jaxarena.make("Arena-v0", scenario="headroom")[1]


def cell(features, params=PAPER, assessment=NO_ASSESSMENT) -> int:
    return int(candidate_cell(jnp.asarray(features, jnp.float32), assessment, params))


def test_counts():
    assert NUM_STATE_CELLS == 162 and NUM_CANDIDATE_CELLS == 810


def test_hp_is_binned_as_a_fraction_of_the_scenario_maximum():
    assert float(HEADROOM.bot_hp) == 5 * float(PAPER.bot_hp)
    for hp in (20.0, 150.0, 290.0):
        assert cell([hp, 30, 5, 1, 6], PAPER) == cell([5 * hp, 30, 5, 1, 6], HEADROOM)
    assert cell([20, 30, 5, 1, 6]) != cell([150, 30, 5, 1, 6]) != cell([290, 30, 5, 1, 6])


def test_thirds_edges():
    # 100/300 and 20/60 are exactly one third: the upper bin.
    below, at = np.nextafter(np.float32(100.0), np.float32(0)), 100.0
    assert cell([below, 30, 5, 1, 6]) != cell([at, 30, 5, 1, 6]) == cell([199, 30, 5, 1, 6])
    assert cell([150, 19.9, 5, 1, 6]) != cell([150, 20.0, 5, 1, 6]) == cell([150, 39.9, 5, 1, 6])


def test_alive_moving_and_distance_bins():
    alive = [cell([150, 30, n, 1, 6]) for n in range(6)]
    assert alive[0] == alive[1] == alive[2] != alive[3] == alive[4] != alive[5]
    assert cell([150, 30, 5, 0.4, 6]) != cell([150, 30, 5, 0.6, 6])
    dist = [cell([150, 30, 5, 1, d]) for d in (0.0, 3.99, 4.0, 9.99, 10.0, 40.0)]
    assert dist[0] == dist[1] != dist[2] == dist[3] != dist[4] == dist[5]


def test_assessment_selects_a_block_of_state_cells_and_is_clipped():
    base = cell([150, 30, 5, 1, 6], assessment=0)
    assert [cell([150, 30, 5, 1, 6], assessment=a) for a in range(5)] == [base + a * NUM_STATE_CELLS for a in range(5)]
    assert cell([150, 30, 5, 1, 6], assessment=9) == cell([150, 30, 5, 1, 6], assessment=NO_ASSESSMENT)


def test_every_cell_round_trips_through_its_representative_state():
    for c in range(NUM_CANDIDATE_CELLS):
        assert cell(cell_features(c), assessment=c // NUM_STATE_CELLS) == c


def test_state_cell_jits_and_vmaps():
    rng = np.random.default_rng(0)
    n = 50
    feats = np.stack(
        [
            rng.uniform(0, 300, n),
            rng.uniform(0, 60, n),
            rng.integers(1, 6, n),
            rng.integers(0, 2, n),
            rng.uniform(0, 30, n),
        ],
        axis=1,
    ).astype(np.float32)
    assessment = rng.integers(0, 5, n)
    cells = jax.jit(jax.vmap(candidate_cell, in_axes=(0, 0, None)))(feats, assessment, PAPER)
    chex.assert_shape(cells, (n,))
    chex.assert_type(cells, jnp.int32)
    np.testing.assert_array_equal(cells, [cell(f, assessment=a) for f, a in zip(feats, assessment, strict=True)])
    np.testing.assert_array_equal(
        jax.vmap(state_cell, in_axes=(0, None))(feats, PAPER), np.asarray(cells) % NUM_STATE_CELLS
    )


def test_candidate_prompt_is_table_10_plus_the_assessment():
    c = cell([250, 50, 5, 1, 14])
    plain = candidate_prompt(c)
    assert plain.system == SYSTEM
    assert plain.user == format_state(250, 50, 5, 1, 14) and "assessment" not in plain.user
    for a, label in enumerate(OPPONENT_LABELS):
        p = candidate_prompt(c - NO_ASSESSMENT * NUM_STATE_CELLS + a * NUM_STATE_CELLS)
        assert p.user == plain.user + f"\nOpponent assessment: {label}."


def test_iterative_prompt_names_what_was_proposed():
    assert iterative_prompt(5, ()) == candidate_prompt(5)
    p = iterative_prompt(5, [1, 2])
    assert p.user.startswith(candidate_prompt(5).user)
    assert p.user.endswith("\nAlready proposed: 1 = Aggressive, 2 = Flank. Propose a strategically different tactic.")


@pytest.mark.parametrize("c", [-1, NUM_CANDIDATE_CELLS])
def test_cells_out_of_range_are_refused(c):
    with pytest.raises(ValueError, match="candidate cell must be in"):
        candidate_prompt(c)


def test_vanilla_top3_ties_to_the_lower_tag():
    tags, probs = vanilla_candidates([0.25, 0.25, 0.25, 0.25])
    np.testing.assert_array_equal(tags, [0, 1, 2])
    tags, probs = vanilla_candidates([0.1, 0.4, 0.4, 0.1])
    np.testing.assert_array_equal(tags, [1, 2, 0])
    np.testing.assert_allclose(probs, [0.4, 0.4, 0.1])
    with pytest.raises(ValueError, match="shape"):
        vanilla_candidates([0.5, 0.5])


def test_dedup_keeps_distinct_proposals():
    probs = [[0.1, 0.6, 0.2, 0.1], [0.1, 0.1, 0.7, 0.1], [0.5, 0.2, 0.2, 0.1]]
    assert dedup([1, 2, 0], probs) == ([1, 2, 0], [0.6, 0.7, 0.5], 0)


def test_dedup_replaces_a_repeat_with_the_same_replys_next_best():
    probs = [[0.1, 0.6, 0.2, 0.1], [0.05, 0.5, 0.15, 0.3], [0.3, 0.4, 0.3, 0.0]]
    tags, tag_probs, repeats = dedup([1, 1, 1], probs)
    # Reply 1: 1 is taken, its next best is 3. Reply 2: 1 and 3 taken; 0 and 2 tie, the lower wins.
    assert tags == [1, 3, 0]
    assert tag_probs == [0.6, 0.3, 0.3]
    assert repeats == 2


def test_dedup_counts_a_repeat_of_any_earlier_candidate():
    probs = [[0.7, 0.1, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1], [0.1, 0.5, 0.1, 0.3]]
    assert dedup([0, 1, 1], probs) == ([0, 1, 3], [0.7, 0.7, 0.3], 1)


def test_dedup_rejects_bad_input():
    with pytest.raises(ValueError, match="probability vectors"):
        dedup([0, 1], [[0.25] * 4])
    with pytest.raises(ValueError, match="tag in 0..3"):
        dedup([5], [[0.25] * 4])

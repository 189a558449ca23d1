"""Deduction: history quantisation (bin edges, unseen points), its prompt, and the logistic baseline."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.llm.deduction import (
    APPROACH_EDGES,
    DEDUCTION_SYSTEM,
    DISTANCE_EDGES,
    DISTANCE_VALUES,
    HOLDING,
    NOT_SEEN,
    NUM_DEDUCTION_CELLS,
    OPPONENT_LABELS,
    TOWARD,
    approach_bin,
    cell_point_states,
    deduction_cell,
    deduction_prompt,
    distance_bin,
)
from jaxarena.llm.history import HISTORY_LEN, NUM_POINT_FEATURES, DecisionHistory, push
from jaxarena.llm.logistic import fit_logistic, majority_class, predict, predict_proba

#: An approach inside each bin, for building histories from bin indices.
APPROACH_VALUES = (-0.6, 0.0, 0.6)


def history(*points) -> DecisionHistory:
    """A history from (distance, approach) pairs, oldest first; None is a point not seen."""
    assert len(points) == HISTORY_LEN
    arr = np.zeros((HISTORY_LEN, NUM_POINT_FEATURES), np.float32)
    valid = np.zeros(HISTORY_LEN, bool)
    for i, p in enumerate(points):
        if p is not None:
            arr[i, 0], arr[i, 1] = p
            valid[i] = True
    return DecisionHistory(jnp.asarray(arr), jnp.asarray(valid), jnp.zeros(2), jnp.zeros(2))


def test_distance_bin_edges():
    low, high = DISTANCE_EDGES
    d = jnp.asarray([0.0, np.nextafter(low, 0, dtype=np.float32), low, np.nextafter(high, 0, dtype=np.float32), high])
    np.testing.assert_array_equal(distance_bin(d), [0, 0, 1, 1, 2])


def test_approach_bin_edges():
    low, high = APPROACH_EDGES
    a = jnp.asarray([-1.0, low, low + 1e-3, 0.0, high - 1e-3, high, 1.0], jnp.float32)
    np.testing.assert_array_equal(approach_bin(a), [0, 0, 1, 1, 1, 2, 2])


def test_cell_digits_are_point_states_oldest_first():
    # (2, away) -> state 0; (7, holding) -> 4; (14, toward) -> 8.
    assert int(deduction_cell(history((2.0, -0.5), (7.0, 0.1), (14.0, 0.9)))) == 48
    assert int(deduction_cell(history((14.0, 0.9), (7.0, 0.1), (2.0, -0.5)))) == 840
    assert int(deduction_cell(history(None, None, None))) == NUM_DEDUCTION_CELLS - 1 == 999


def test_first_sighting_reads_as_holding_whatever_the_array_says():
    # The middle point follows an unseen one: its approach (0.9) is ignored; the last one is read.
    cell = int(deduction_cell(history(None, (7.0, 0.9), (2.0, 0.5))))
    assert cell_point_states(cell) == (NOT_SEEN, 1 * 3 + HOLDING, 0 * 3 + TOWARD)


def test_every_reachable_cell_round_trips_through_its_representative_values():
    # Reachable: seen points are a suffix (push fills from the right), and a first sighting holds.
    count = 0
    for cell in range(NUM_DEDUCTION_CELLS):
        states = cell_point_states(cell)
        seen = [s != NOT_SEEN for s in states]
        if seen != sorted(seen):
            continue
        first = seen.index(True) if any(seen) else None
        if first is not None and first > 0 and states[first] % 3 != HOLDING:
            continue
        points = [None if s == NOT_SEEN else (DISTANCE_VALUES[s // 3], APPROACH_VALUES[s % 3]) for s in states]
        assert int(deduction_cell(history(*points))) == cell
        count += 1
    # nothing seen; the latest point only; the last two; all three (the oldest one's movement is read as is).
    assert count == 1 + 3 + 3 * 9 + 9**3


def test_deduction_cell_jits_and_vmaps():
    rng = np.random.default_rng(0)
    n = 64
    points = np.zeros((n, HISTORY_LEN, NUM_POINT_FEATURES), np.float32)
    points[:, :, 0] = rng.uniform(0, 20, (n, HISTORY_LEN))
    points[:, :, 1] = rng.uniform(-1, 1, (n, HISTORY_LEN))
    seen = rng.integers(0, HISTORY_LEN + 1, n)
    valid = np.arange(HISTORY_LEN)[None] >= (HISTORY_LEN - seen)[:, None]
    batch = DecisionHistory(jnp.asarray(points), jnp.asarray(valid), jnp.zeros((n, 2)), jnp.zeros((n, 2)))
    cells = jax.jit(jax.vmap(deduction_cell))(batch)
    chex.assert_shape(cells, (n,))
    chex.assert_type(cells, jnp.int32)
    one_by_one = [int(deduction_cell(jax.tree.map(lambda x, i=i: x[i], batch))) for i in range(n)]
    np.testing.assert_array_equal(cells, one_by_one)
    assert np.all((np.asarray(cells) >= 0) & (np.asarray(cells) < NUM_DEDUCTION_CELLS))


def test_real_pushes_fill_the_history_from_the_right():
    env, params = jaxarena.make("Arena-v0", bot="aggressive")
    _, state = env.reset(jax.random.PRNGKey(3), params)
    h = history(None, None, None)
    h = push(h, state, params)
    first = cell_point_states(int(deduction_cell(h)))
    assert first[:2] == (NOT_SEEN, NOT_SEEN) and first[2] != NOT_SEEN and first[2] % 3 == HOLDING
    moved = state.replace(bot_pos=state.bot_pos + params.bot_speed * params.decision_period_s * 0.5)
    h = push(h, moved, params)
    assert cell_point_states(int(deduction_cell(h)))[0] == NOT_SEEN
    assert cell_point_states(int(deduction_cell(h)))[1] == first[2]


def test_prompt_describes_the_cell_in_words():
    p = deduction_prompt(int(deduction_cell(history(None, (7.0, 0.9), (2.0, 0.5)))))
    assert p.system == DEDUCTION_SYSTEM
    assert "10 s ago: no data yet" in p.user
    assert "5 s ago: nearest NPC 7.0 units away, first sighting" in p.user
    assert "now: nearest NPC 2.0 units away, the bot moved toward the squad" in p.user
    assert deduction_prompt(999).user.count("no data yet") == 3
    assert "moved away from the squad" in deduction_prompt(0).user
    for i, label in enumerate(OPPONENT_LABELS):
        assert f"{i} = {label}" in DEDUCTION_SYSTEM
    assert len({deduction_prompt(c).user for c in range(NUM_DEDUCTION_CELLS)}) > 800


@pytest.mark.parametrize("cell", [-1, NUM_DEDUCTION_CELLS])
def test_prompt_rejects_cells_out_of_range(cell):
    with pytest.raises(ValueError, match="deduction cell must be in"):
        deduction_prompt(cell)


def test_logistic_regression_beats_majority_on_separable_data():
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [6.0, 6.0]])
    # Unbalanced classes, so the majority baseline scores well above chance.
    counts = [400, 150, 100, 50]
    y = np.concatenate([np.full(c, k) for k, c in enumerate(counts)])
    x = centres[y] + rng.normal(0, 0.7, (len(y), 2))
    xt_y = rng.integers(0, 4, 400)
    xt = centres[xt_y] + rng.normal(0, 0.7, (400, 2))
    model = fit_logistic(x, y, 4)
    acc = np.mean(predict(model, xt) == xt_y)
    majority = np.mean(majority_class(y, 4) == xt_y)
    assert majority_class(y, 4) == 0
    assert acc > 0.95 > majority + 0.5
    proba = predict_proba(model, xt)
    chex.assert_shape(proba, (400, 4))
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)


def test_logistic_regression_handles_a_constant_column():
    x = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    y = np.array([0, 0, 1, 1])
    model = fit_logistic(x, y, 2)
    np.testing.assert_array_equal(predict(model, x), y)
    assert np.all(np.isfinite(predict_proba(model, x)))


def test_majority_ties_go_to_the_lower_class():
    assert majority_class(np.array([2, 1, 2, 1]), 3) == 1

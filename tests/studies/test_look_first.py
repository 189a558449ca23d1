"""The look-first reader: Retreat where the bot closed in during the first seconds, else Aggressive."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from look_first import (
    AGGRESSIVE,
    RETREAT,
    initial_carry,
    look_first_report,
    look_first_source,
    markdown,
)

import jaxarena
from jaxarena.llm.deduction import TOWARD, approach_bin
from jaxarena.llm.history import APPROACH, HISTORY_LEN, NUM_POINT_FEATURES, DecisionHistory, push
from jaxarena.runner import make_runner

PERIOD_S, WINDOW_S = 0.2, 1.0


def _rollout(window_s: float, episodes: int = 4, periods: int = 12):
    """Squads that stand still against the aggressive bot, a decision every 0.2 s, every decision state kept."""
    env, params = jaxarena.make("Arena-v0", bot="aggressive")
    params = params.replace(decision_period_s=PERIOD_S)
    run = make_runner(
        env,
        params,
        lambda p, o, k: jnp.zeros(5, jnp.int32),
        look_first_source(),
        episodes,
        num_periods=periods,
        record_states=True,
    )
    return run(None, params, jax.random.key(0), tag_state=initial_carry(window_s, episodes)), params


def test_the_reader_retreats_only_where_the_bot_closed_in_before_the_window_ends():
    result, params = _rollout(WINDOW_S)
    tags = np.asarray(result.decision_tags)
    chex.assert_shape(tags, (12, 4))
    # The same rule on the host, from the recorded decision states.
    for n in range(tags.shape[1]):
        history = DecisionHistory(
            jnp.zeros((HISTORY_LEN, NUM_POINT_FEATURES)), jnp.zeros(HISTORY_LEN, bool), jnp.zeros(2), jnp.zeros(2)
        )
        for p in range(tags.shape[0]):
            history = push(history, jax.tree.map(lambda x, p=p, n=n: x[p, n], result.decision_states), params)
            closing = int(approach_bin(history.points[-1, APPROACH])) == TOWARD
            early = round(p * PERIOD_S / params.dt) < round(WINDOW_S / params.dt)  # in whole ticks
            assert tags[p, n] == (RETREAT if early and closing else AGGRESSIVE), (p, n)
    assert np.all(tags[0] == AGGRESSIVE)  # nothing has moved at the first decision
    assert np.any(tags == RETREAT)  # the aggressive bot charges at squads that stand still
    assert np.all(tags[round(WINDOW_S / PERIOD_S) :] == AGGRESSIVE)  # the window's own decision is after it


def test_a_window_of_zero_is_always_aggressive_and_a_negative_one_is_refused():
    result, _ = _rollout(0.0)
    assert np.all(np.asarray(result.decision_tags) == AGGRESSIVE)
    with pytest.raises(ValueError, match="look window must be >= 0"):
        initial_carry(-0.5, 4)


@pytest.mark.slow  # the shipped raid squad's rollout compiled at a 0.2 s period (~30 s on 2 cores)
def test_the_report_pairs_the_reader_with_always_aggressive_on_the_protocols_keys():
    kwargs = dict(scenario="raid", policy_spec="B-obey-raid", period_s=PERIOD_S, episodes=8, n_boot=200)
    result = look_first_report(window_s=1.4, bots=("aggressive", "evasive"), **kwargs)
    base, reader = result["readers"]["always Aggressive"], result["readers"]["look first"]
    for bot in ("aggressive", "evasive"):
        assert base[bot]["minus_always_aggressive"] == [0.0, 0.0, 0.0] and base[bot]["retreat_share"] == 0.0
        diff = reader[bot]["minus_always_aggressive"]
        assert diff[0] == pytest.approx(reader[bot]["win_pct"] - base[bot]["win_pct"])
        assert diff[1] <= diff[0] <= diff[2]
    assert reader["aggressive"]["retreat_share"] > 0.0  # the aggressive bot charges: the reader steps back
    assert "| look first |" in markdown(result)
    # Always Aggressive does not depend on the period: it is the squad under a fixed tag, the same episodes.
    again = look_first_report(window_s=0.0, bots=("aggressive",), **{**kwargs, "period_s": 1.0})
    assert again["readers"]["look first"]["aggressive"]["win_pct"] == base["aggressive"]["win_pct"]

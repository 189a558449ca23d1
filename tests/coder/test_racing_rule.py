"""The racing rule (`jaxarena.coder.racing`) on hand-made counts: bounds, drops, and the multiple-looks correction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxarena.coder.racing import RaceConfig, kl_bounds, look_delta, reward_bounds, still_racing


def test_kl_bounds_at_zero_and_all_wins_are_the_closed_forms():
    # n kl(0, q) = -n log(1 - q), so the upper bound of 0 wins is 1 - delta^(1/n); symmetric for n wins.
    n = np.asarray([1, 10, 100, 1000])
    delta = 1e-3
    lo0, hi0 = kl_bounds(np.zeros(4), n, delta)
    lo1, hi1 = kl_bounds(n, n, delta)
    np.testing.assert_allclose(hi0, 1 - delta ** (1 / n), rtol=1e-9)
    np.testing.assert_allclose(lo1, delta ** (1 / n), rtol=1e-9)
    np.testing.assert_array_equal(lo0, 0.0)
    np.testing.assert_array_equal(hi1, 1.0)


def test_kl_bounds_hold_the_estimate_shrink_with_n_and_sit_inside_hoeffding():
    n = np.asarray([10, 40, 160, 640])
    wins = np.round(0.3 * n)
    delta = 1e-4
    lo, hi = kl_bounds(wins, n, delta)
    p = wins / n
    assert np.all(lo <= p) and np.all(p <= hi)
    assert np.all(np.diff(hi - lo) < 0)  # more episodes, narrower
    # Pinsker: kl >= 2 (p - q)^2, so the KL interval is inside Hoeffding's.
    half = np.sqrt(math.log(1 / delta) / (2 * n))
    assert np.all(hi <= p + half + 1e-12) and np.all(lo >= p - half - 1e-12)
    assert np.all(hi - lo < 2 * half)  # and strictly tighter away from p = 1/2
    lo_none, hi_none = kl_bounds(np.asarray([0]), np.asarray([0]), delta)
    assert (lo_none[0], hi_none[0]) == (0.0, 1.0)  # no episodes: anything


def test_reward_bounds_are_the_tighter_of_pooled_and_per_bot_each_at_half_the_error():
    wins = np.asarray([[100, 0, 100], [60, 70, 70]])  # near 0 and 1 (per bot wins), mid-range (pooled wins)
    lo, hi = reward_bounds(wins, np.asarray([100, 100]), 1e-3)
    lo_pooled, hi_pooled = kl_bounds(np.asarray([200, 200]), np.asarray([300, 300]), 0.5e-3)
    lo_bot, hi_bot = kl_bounds(wins, np.full((2, 3), 100), 1e-3 / 6)
    np.testing.assert_allclose(lo, np.maximum(lo_pooled, lo_bot.mean(axis=1)))
    np.testing.assert_allclose(hi, np.minimum(hi_pooled, hi_bot.mean(axis=1)))
    assert hi[0] == pytest.approx(hi_bot[0].mean()) and hi[1] == pytest.approx(hi_pooled[1])  # each wins once
    assert np.all(lo < 2 / 3) and np.all(2 / 3 < hi)


def test_a_clearly_worse_candidate_is_dropped_a_close_one_and_the_incumbent_stay():
    n = np.asarray([100, 100, 100])
    wins = np.asarray([[90, 90, 90], [86, 88, 85], [10, 20, 5]])  # incumbent, close, clearly worse
    delta = look_delta(0.05, looks=4, candidates=3)
    keep = still_racing(wins, n, np.ones(3, bool), delta)
    assert keep.tolist() == [True, True, False]
    # A dropped candidate stays dropped, and a row that is not racing (an earlier incumbent) still sets the bar.
    keep = still_racing(wins, n, np.asarray([False, True, False]), delta)
    assert keep.tolist() == [False, True, False]


def test_an_incumbent_with_more_episodes_sets_a_higher_bar():
    wins = np.asarray([[55, 55, 55], [950, 950, 950]])  # 55 of 100 per bot vs an incumbent's 95% of 1,000
    racing = np.asarray([True, False])
    delta = look_delta(0.05, looks=4, candidates=2)
    assert not still_racing(wins, np.asarray([100, 1000]), racing, delta)[0]
    # A perfect record on 5 episodes per bot is too uncertain to drop anyone.
    assert still_racing(np.asarray([[55, 55, 55], [5, 5, 5]]), np.asarray([100, 5]), racing, delta)[0]


def test_the_multiple_looks_correction_splits_alpha_and_can_keep_what_one_look_drops():
    assert look_delta(0.05, looks=4, candidates=8) == pytest.approx(0.05 / 64)
    n = np.asarray([200, 200])
    wins = np.asarray([[160, 160, 160], [130, 130, 130]])  # 80% vs 65% per bot
    racing = np.ones(2, bool)
    one_look = look_delta(0.05, looks=1, candidates=2)
    many_looks = look_delta(0.05, looks=1000, candidates=2)
    assert still_racing(wins, n, racing, one_look).tolist() == [True, False]
    assert still_racing(wins, n, racing, many_looks).tolist() == [True, True]


def _false_drop_rate(delta_of, races: int, k: int, p: float = 0.5, seed: int = 0) -> float:
    """Races of `k` equal candidates (true win rate p on 3 bots): the share of races that drop any of them."""
    rng = np.random.default_rng(seed)
    looks = RaceConfig(first=5, growth=1.5).looks(200)
    delta = delta_of(len(looks), k)
    outcomes = rng.random((races, k, 3, looks[-1])) < p
    racing = np.ones((races, k), bool)
    n = np.zeros((races, k), int)
    for stop in looks:  # all races at once: leading axes of the rule are independent races
        n = np.where(racing, stop, n)
        played = np.arange(looks[-1]) < n[..., None, None]
        racing = still_racing((outcomes & played).sum(axis=-1), n, racing, delta)
    return float(np.mean(~racing.all(axis=-1)))


def test_repeated_looks_keep_the_false_drop_rate_below_alpha_only_with_the_correction():
    """Equal candidates: any drop is an error. Corrected: <= alpha. Uncorrected (alpha / 2 per bound): above."""
    alpha = 0.2
    corrected = _false_drop_rate(lambda looks, k: look_delta(alpha, looks, k), races=600, k=16)
    uncorrected = _false_drop_rate(lambda looks, k: alpha / 2, races=600, k=16)
    assert corrected <= alpha
    assert uncorrected > alpha


def test_looks_grow_to_the_full_budget():
    assert RaceConfig(first=30, growth=3.0).looks(1000) == (30, 90, 270, 810, 1000)
    assert RaceConfig(first=50, growth=2.0).looks(100) == (50, 100)
    assert RaceConfig(first=500).looks(100) == (100,)


def test_a_slow_growth_never_repeats_a_look():
    """A look equal to the last would play no episodes (and cost a correction term for nothing)."""
    looks = RaceConfig(first=1, growth=1.2).looks(10)
    assert looks[0] == 1 and looks[-1] == 10
    assert all(a < b for a, b in zip(looks[:-1], looks[1:], strict=True)), looks


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"first": 0}, "first"),
        ({"growth": 1.0}, "growth"),
        ({"alpha": 1.0}, "alpha"),
        ({"lanes": 0}, "lanes"),
        ({"speculate": "yes"}, "speculate must be True or False"),
    ],
)
def test_bad_race_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RaceConfig(**kwargs)

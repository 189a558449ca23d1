"""Protocol statistics on known data, checked by hand and against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from jaxarena.protocol import stats


def test_describe_matches_numpy_and_counts_outcomes():
    d = [10.0, 20.0, 30.0, 120.0, 120.0]
    o = [1, 1, 2, 3, 3]
    row = stats.describe(d, o)
    assert row["n"] == 5
    assert row["mean_s"] == pytest.approx(60.0)
    assert row["median_s"] == pytest.approx(30.0)
    assert row["std_s"] == pytest.approx(np.std(d, ddof=1))
    assert (row["npc_win_pct"], row["bot_win_pct"], row["timeout_pct"]) == (40.0, 20.0, 40.0)
    assert row["unfinished"] == 0


def test_mann_whitney_hand_example_with_ties():
    # Counted by hand: pairs (a > b) + 0.5 * ties = 0 + 0.5 + 0.5 + 1.5 + 4 = 6.5.
    a = [1, 2, 2, 3, 5]
    b = [2, 3, 4, 4, 6]
    res = stats.mann_whitney(a, b)
    assert res["U"] == 6.5
    assert res["U"] == sps.mannwhitneyu(a, b, alternative="two-sided").statistic
    assert res["p"] == pytest.approx(sps.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    assert res["r_rb"] == pytest.approx(1 - 2 * 6.5 / 25)
    # Our Z (no continuity correction) reproduces scipy's asymptotic p without correction.
    p_plain = sps.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic", use_continuity=False).pvalue
    assert 2 * sps.norm.sf(abs(res["z"])) == pytest.approx(p_plain)
    assert res["r"] == pytest.approx(res["z"] / math.sqrt(10))
    assert res["direction"] == "B longer" and res["r"] > 0 and res["r_rb"] > 0


def test_effect_size_is_negative_when_b_is_shorter():
    rng = np.random.default_rng(1)
    a = rng.normal(80, 10, 100)
    b = a - 15  # B clearly shorter
    res = stats.mann_whitney(a, b)
    assert res["direction"] == "B shorter"
    assert res["r"] < 0 and res["r_rb"] < 0 and res["U"] > 5000
    assert res["stars"] == "***" and res["significant"]
    flipped = stats.mann_whitney(b, a)
    assert flipped["r"] == pytest.approx(-res["r"]) and flipped["direction"] == "B longer"


def test_paper_effect_sizes_are_rank_biserial():
    # Table 8: U and r of the paper. r = 1 - 2U/(n1 n2) reproduces every r to 3 decimals,
    # which is why we report r_rb beside r = Z/sqrt(N).
    for u, r in [(6430.5, -0.286), (6032.0, -0.206), (3668.5, +0.266)]:
        assert round(1 - 2 * u / 10_000, 3) == pytest.approx(r, abs=6e-4)


def test_p_matches_scipy_on_large_sample_with_ties():
    rng = np.random.default_rng(0)
    a = np.minimum(rng.exponential(60, 100), 120.0)  # many ties at the 120 s cap
    b = np.minimum(rng.exponential(90, 100), 120.0)
    res = stats.mann_whitney(a, b)
    ref = sps.mannwhitneyu(a, b, alternative="two-sided")
    assert res["U"] == ref.statistic and res["p"] == pytest.approx(ref.pvalue)


@pytest.mark.parametrize("p, stars", [(0.0005, "***"), (0.0011, "**"), (0.0117, "*"), (0.2, "ns"), (0.05, "ns")])
def test_stars(p, stars):
    assert stats.significance_stars(p) == stars


def test_bootstrap_ci_is_seeded_and_covers_the_rate():
    o = np.array([1] * 30 + [2] * 50 + [3] * 20)
    lo, hi = stats.bootstrap_rate_ci(o, 1, seed=3)
    assert (lo, hi) == stats.bootstrap_rate_ci(o, 1, seed=3)
    assert lo < 30.0 < hi
    # Close to the normal approximation for n = 100, p = 0.3: ±1.96·sqrt(p(1-p)/n) ≈ ±9 points.
    assert 5 < 30 - lo < 13 and 5 < hi - 30 < 13
    # And to a literal index-resampling bootstrap.
    rng = np.random.default_rng(0)
    idx = rng.integers(0, o.size, (20_000, o.size))
    ref = np.quantile((o[idx] == 1).mean(1), [0.025, 0.975]) * 100
    assert lo == pytest.approx(ref[0], abs=1.5) and hi == pytest.approx(ref[1], abs=1.5)
    cis = stats.outcome_cis(o)
    assert set(cis) == {"npc_win", "bot_win", "timeout"}


def test_tag_frequency():
    f = stats.tag_frequency([0, 0, 0, 1, 3])
    assert f["counts"] == [3, 1, 0, 1] and f["total"] == 5
    assert f["pct"] == pytest.approx([60.0, 20.0, 0.0, 20.0])


def test_the_stratified_paired_bootstrap_resamples_within_each_stratum_and_is_the_paired_one_for_one():
    from jaxarena.protocol.stats import paired_bootstrap_diff, stratified_paired_bootstrap_diff

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    assert stratified_paired_bootstrap_diff([a], [b], n_boot=500, seed=3) == paired_bootstrap_diff(
        a, b, n_boot=500, seed=3
    )
    # One stratum gains every episode, the other none: the mean is 0.5 in every resample that keeps the strata.
    diff, low, high = stratified_paired_bootstrap_diff([np.ones(50), a[:50]], [np.zeros(50), a[:50]], n_boot=500)
    assert diff == low == high == 0.5
    with pytest.raises(ValueError, match="as many a as b"):
        stratified_paired_bootstrap_diff([a], [b, b])
    with pytest.raises(ValueError, match="equal non-empty 1-d shapes"):
        stratified_paired_bootstrap_diff([a, a], [b, b[:10]])

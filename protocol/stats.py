"""Statistics of the protocol (paper, Tables 6-9): descriptive stats, Mann-Whitney U, bootstrap CIs.

Pure numpy/scipy on plain arrays: nothing here imports JAX or the arena, so the
numbers can be recomputed from `episodes.csv` alone. It lives in
`jaxarena.protocol` (not in the environment package): statistics are part of the
evaluation protocol, not of the environment, and the tuning, a layer above the
protocol, measures its adapters with them (docs/layout.md, "Layers").

Conventions (fixed here, written into every report):

- *Time-to-defeat* is the episode's length in game seconds, for every episode,
  whatever its outcome; a timeout counts as the episode's length (120 s, or
  the scenario's `episode_s`). This is how the paper's
  medians of 120.00 s for the balanced bot arise (60 % timeouts).
- Std is the sample standard deviation (ddof = 1).
- Outcome codes follow `info["outcome"]`: 1 NPC win, 2 bot win, 3 timeout.
- Mann-Whitney U is computed as `scipy.stats.mannwhitneyu(a, b)` with `a` the
  Combination A durations, so U is A's statistic (the paper's Table 8: U > n1·n2/2
  means A's episodes tend to be longer, i.e. "B shorter").
- Effect sizes are signed so that **r < 0 means B shorter**, as in the paper:
  `r = Z/√N` with Z the tie-corrected normal score of B's U (U_B = n1·n2 − U_A),
  no continuity correction, N = n1 + n2; and the rank-biserial correlation
  `r_rb = 1 − 2·U_A/(n1·n2)`. The paper's r column equals r_rb exactly
  (e.g. 1 − 2·6430.5/10000 = −0.286), so both are reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

from jaxarena import names
from jaxarena.llm.choice import entropy_bits

#: Outcome code -> name, as `info["outcome"]` reports it (`jaxarena.names.OUTCOMES`).
OUTCOME_NAMES: dict[int, str] = dict(enumerate(names.OUTCOMES))
#: Outcomes as the paper's tables order them.
OUTCOMES: tuple[tuple[int, str], ...] = tuple(
    (code, names.OUTCOMES[code]) for code in (names.NPC_WIN, names.BOT_WIN, names.TIMEOUT)
)


def describe(durations: Sequence[float], outcomes: Sequence[int]) -> dict:
    """Tables 6/7 row: n, mean/median/std of time-to-defeat (s) and outcome percentages."""
    d = np.asarray(durations, dtype=np.float64)
    o = np.asarray(outcomes, dtype=np.int64)
    if d.shape != o.shape or d.ndim != 1:
        raise ValueError(f"durations {d.shape} and outcomes {o.shape} must be equal 1-d shapes")
    n = int(d.size)
    out: dict = {
        "n": n,
        "mean_s": float(d.mean()) if n else math.nan,
        "median_s": float(np.median(d)) if n else math.nan,
        "std_s": float(d.std(ddof=1)) if n > 1 else math.nan,
    }
    for code, name in OUTCOMES:
        out[f"{name}_pct"] = 100.0 * float(np.mean(o == code)) if n else math.nan
    out["unfinished"] = int(np.sum(o == 0))
    return out


def significance_stars(p: float) -> str:
    """'***' p < 0.001, '**' p < 0.01, '*' p < 0.05, else 'ns' (the paper's Table 8 marks)."""
    if not np.isfinite(p):
        return ""
    if p < 0.001:
        return "***"
    if p < 0.01:
        return "**"
    if p < 0.05:
        return "*"
    return "ns"


def mann_whitney(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> dict:
    """Two-sided Mann-Whitney U test of A vs B durations, with signed effect sizes.

    Returns U (A's statistic, as scipy reports it for `mannwhitneyu(a, b)`),
    p (scipy's, method "auto"), z (tie-corrected normal score of U_B, no
    continuity correction), r = z/√N, rank-biserial r_rb, the direction
    ("B shorter", "B longer" or "no difference"), the stars and whether
    p < alpha. See the module docstring for the sign convention.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    res = sps.mannwhitneyu(x, y, alternative="two-sided")
    u_a = float(res.statistic)
    u_b = n1 * n2 - u_a
    n = n1 + n2
    # Tie-corrected standard deviation of U under H0 (the same one scipy's
    # asymptotic method uses); Z is computed without continuity correction so
    # that r is a plain, symmetric effect size.
    ranks = sps.rankdata(np.concatenate([x, y]))
    _, counts = np.unique(ranks, return_counts=True)
    tie_term = float(np.sum(counts**3 - counts)) / (n * (n - 1)) if n > 1 else 0.0
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term))
    z = (u_b - n1 * n2 / 2.0) / sigma if sigma > 0 else 0.0
    r = z / math.sqrt(n)
    r_rb = 1.0 - 2.0 * u_a / (n1 * n2)
    direction = "B shorter" if u_a > u_b else "B longer" if u_a < u_b else "no difference"
    p = float(res.pvalue)
    return {
        "n1": int(n1),
        "n2": int(n2),
        "U": u_a,
        "p": p,
        "z": float(z),
        "r": float(r),
        "r_rb": float(r_rb),
        "direction": direction,
        "stars": significance_stars(p),
        "significant": bool(p < alpha),
        "alpha": alpha,
    }


def bootstrap_rate_ci(
    outcomes: Sequence[int], code: int, *, n_boot: int = 10_000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI (in %) of the share of episodes with outcome `code`.

    Resampling n episodes with replacement and counting `code` draws a
    Binomial(n, p̂) count, so the resamples are drawn that way directly: the
    same distribution as index resampling, in O(n_boot) instead of O(n·n_boot).
    Seeded, so a report is reproducible.
    """
    o = np.asarray(outcomes)
    n = o.size
    if n == 0:
        return (math.nan, math.nan)
    p_hat = float(np.mean(o == code))
    rng = np.random.default_rng(seed)
    rates = rng.binomial(n, p_hat, size=n_boot) / n
    lo, hi = np.quantile(rates, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (100.0 * float(lo), 100.0 * float(hi))


def outcome_cis(outcomes: Sequence[int], *, n_boot: int = 10_000, level: float = 0.95, seed: int = 0) -> dict:
    """Bootstrap CIs for every outcome: {"npc_win": (lo, hi), ...} in %."""
    return {
        name: bootstrap_rate_ci(outcomes, code, n_boot=n_boot, level=level, seed=seed + code) for code, name in OUTCOMES
    }


def tag_frequency(tags: Sequence[int], num_tags: int = names.NUM_TAGS) -> dict:
    """Table 9: count and % of decisions per tag."""
    t = np.asarray(tags, dtype=np.int64)
    counts = np.bincount(t, minlength=num_tags)[:num_tags] if t.size else np.zeros(num_tags, np.int64)
    total = int(counts.sum())
    return {
        "total": total,
        "counts": [int(c) for c in counts],
        "pct": [100.0 * float(c) / total if total else math.nan for c in counts],
    }


def choice_probabilities(probs: Sequence[Sequence[float]], num_tags: int = names.NUM_TAGS) -> dict:
    """What a choice-decoding LLM preferred: the mean of its per-decision tag probabilities,
    the mean entropy of those distributions (bits; 2.0 is indifference among 4 tags) and
    how often each tag was its most probable one. Empty input gives n = 0 and NaNs."""
    if len(probs) == 0:
        return {"n": 0, "mean": [math.nan] * num_tags, "entropy_bits": math.nan, "top1": [0] * num_tags}
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != num_tags:
        raise ValueError(f"expected one probability per tag ({num_tags}) for each decision, got shape {p.shape}")
    entropy = entropy_bits(p)
    top1 = np.bincount(np.argmax(p, axis=-1), minlength=num_tags)
    return {
        "n": int(len(p)),
        "mean": [float(x) for x in p.mean(axis=0)],
        "entropy_bits": float(entropy.mean()),
        "top1": [int(x) for x in top1],
    }


def paired_bootstrap_diff(
    a: Sequence[float], b: Sequence[float], *, n_boot: int = 10_000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """mean(a - b) of paired samples and its percentile bootstrap CI: (diff, low, high).

    Episode i of two cells of a bot shares its key (the paired design), so the
    pairs are resampled together: the CI reflects that both see the same spawns.
    """
    return stratified_paired_bootstrap_diff([a], [b], n_boot=n_boot, level=level, seed=seed)


def stratified_paired_bootstrap_diff(
    a_strata: Sequence[Sequence[float]],
    b_strata: Sequence[Sequence[float]],
    *,
    n_boot: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The mean over strata (e.g. bots) of each stratum's mean(a - b), and its percentile bootstrap CI.

    Pairs are resampled within each stratum, so every resample keeps the strata's equal weights; with one
    stratum this is `paired_bootstrap_diff`, to the bit.
    """
    if len(a_strata) != len(b_strata) or not a_strata:
        raise ValueError(f"paired strata need as many a as b, at least one: got {len(a_strata)} and {len(b_strata)}")
    rng = np.random.default_rng(seed)
    means, diffs = np.zeros(n_boot), []
    for a, b in zip(a_strata, b_strata, strict=True):
        x = np.asarray(a, dtype=np.float64)
        y = np.asarray(b, dtype=np.float64)
        if x.shape != y.shape or x.ndim != 1 or x.size == 0:
            raise ValueError(f"paired samples need equal non-empty 1-d shapes, got {x.shape} and {y.shape}")
        d = x - y
        diffs.append(d.mean())
        means += d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1) / len(a_strata)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(np.mean(diffs)), float(lo), float(hi)


def cluster_bootstrap_mean(
    values: Sequence[float], clusters: Sequence[int], *, n_boot: int = 10_000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of `values` and a percentile CI from resampling whole clusters: (mean, low, high).

    The decisions of one episode are not independent (one trajectory), so the
    episodes, not the decisions, are resampled; each resample's mean is over
    every decision of the drawn episodes.
    """
    v = np.asarray(values, dtype=np.float64)
    c = np.asarray(clusters)
    if v.shape != c.shape or v.ndim != 1 or v.size == 0:
        raise ValueError(f"values {v.shape} and clusters {c.shape} must be equal non-empty 1-d shapes")
    ids, inverse = np.unique(c, return_inverse=True)
    sums = np.bincount(inverse, weights=v, minlength=ids.size)
    sizes = np.bincount(inverse, minlength=ids.size).astype(np.float64)
    rng = np.random.default_rng(seed)
    # How often each episode is drawn in each resample (a multinomial draw is index resampling).
    counts = rng.multinomial(ids.size, np.full(ids.size, 1.0 / ids.size), size=n_boot)
    means = (counts @ sums) / (counts @ sizes)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(v.mean()), float(lo), float(hi)

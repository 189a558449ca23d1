"""The packaged policies load, play, and B responds to its strategy tag."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jaxarena.algorithms.checkpoint import PRETRAINED_DIR, load_policy
from jaxarena.algorithms.evaluation import run_episodes, wilson_interval

from jaxarena.types import AGGRESSIVE, FLANK, RETREAT_TAG

needs = lambda name: pytest.mark.skipif(
    not (PRETRAINED_DIR / name / "config.json").exists(), reason=f"no packaged policy {name}"
)


@needs("A")
def test_packaged_a_loads_and_beats_the_aggressive_bot():
    policy, params = load_policy("A", greedy=True)
    res = run_episodes(lambda obs, key: policy(params, obs, key), "aggressive", n=64, seed=123)
    assert np.mean(res["outcome"] == 1) > 0.8


def _tag_stats(tags, n=64):
    policy, params = load_policy("B")
    act = jax.jit(lambda obs, key: policy(params, obs, key))
    stats = {}
    for tag in tags:
        res = run_episodes(act, "balanced", n=n, seed=7, tag=tag)
        stats[tag] = (float(res["mean_distance"].mean()), float(res["lateral_share"].mean()))
    return stats


@needs("B")
@pytest.mark.slow
def test_packaged_b_retreat_keeps_farther_than_aggressive():
    """Same seeded episodes vs the balanced bot: Retreat raises the mean NPC-bot distance."""
    stats = _tag_stats((AGGRESSIVE, RETREAT_TAG))
    assert stats[RETREAT_TAG][0] > stats[AGGRESSIVE][0] + 3.0, stats


@needs("B")
@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="known gap: the shipped B does not raise its lateral-arc share under Flank "
    "(see docs/training.md); remove this mark when a shipped B passes",
)
def test_packaged_b_flank_raises_lateral_share():
    stats = _tag_stats((AGGRESSIVE, FLANK))
    assert stats[FLANK][1] > stats[AGGRESSIVE][1] + 0.05, stats


def test_wilson_interval():
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    lo, hi = wilson_interval(0, 1000)
    assert lo == 0.0 and 0.0 < hi < 0.005

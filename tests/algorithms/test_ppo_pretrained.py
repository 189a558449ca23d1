"""The packaged policies load, play, and B responds to its strategy tag."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxarena.algorithms.checkpoint import PRETRAINED_DIR, load_policy
from jaxarena.algorithms.evaluation import run_episodes, wilson_interval
from jaxarena.types import AGGRESSIVE, FLANK, RETREAT_TAG

needs = lambda name: pytest.mark.skipif(  # noqa: E731
    not (PRETRAINED_DIR / name / "config.json").exists(), reason=f"no packaged policy {name}"
)


@needs("A")
def test_packaged_a_loads_and_beats_the_aggressive_bot():
    policy, params = load_policy("A", greedy=True)
    res = run_episodes(lambda obs, key: policy(params, obs, key), "aggressive", n=64, seed=123)
    assert np.mean(res["outcome"] == 1) > 0.8


@needs("B")
@pytest.mark.slow
def test_packaged_b_follows_its_tag():
    """Retreat keeps the squad farther from the bot than Aggressive; Flank raises the lateral share."""
    policy, params = load_policy("B")
    act = jax.jit(lambda obs, key: policy(params, obs, key))
    stats = {}
    for tag in (AGGRESSIVE, FLANK, RETREAT_TAG):
        res = run_episodes(act, "balanced", n=64, seed=7, tag=tag)
        stats[tag] = (res["mean_distance"].mean(), res["lateral_share"].mean())
    assert stats[RETREAT_TAG][0] > stats[AGGRESSIVE][0] + 1.0, stats
    assert stats[FLANK][1] > stats[AGGRESSIVE][1] + 0.05, stats


def test_wilson_interval():
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    lo, hi = wilson_interval(0, 1000)
    assert lo == 0.0 and 0.0 < hi < 0.005

"""The recommended squads' cards hold: their reference win rates re-measured (slow).

Each card names the episodes it was measured on (n per bot, the seed, the tag held); the same
episodes are played again through the one episode runner, and the measured rate must lie inside the
card's 95% interval. A card whose rates were "not measured" has nothing to check.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxarena import zoo
from jaxarena.algorithms.evaluation import run_episodes
from jaxarena.names import NPC_WIN

RECOMMENDED = [c.name for c in zoo.list(kind="squad", status="recommended")]


def measured_win_pct(policy: zoo.Policy, rate: zoo.WinRate) -> float:
    """The squad's NPC win % over the card's episodes: its n and seed (0 where the card records none)."""
    res = run_episodes(
        policy.fn,
        policy.params,
        rate.bot,
        n=rate.n,
        seed=0 if rate.seed is None else rate.seed,
        tag=rate.tag or 0,
        env_id=policy.env_id,
        scenario=policy.scenario,
    )
    return 100.0 * float(np.mean(res["outcome"] == NPC_WIN))


@pytest.mark.slow
@pytest.mark.parametrize("name", RECOMMENDED)
def test_a_recommended_squad_wins_as_its_card_says(name):
    policy = zoo.load(name)
    if not policy.card.measured:
        pytest.skip(f"{name}: win rates not measured")
    for rate in policy.card.win_rates:
        pct = measured_win_pct(policy, rate)
        lo, hi = rate.ci95
        assert lo <= pct <= hi, f"{name} vs {rate.bot} ({rate.tag}): {pct:.1f}% outside the card's [{lo}, {hi}]"

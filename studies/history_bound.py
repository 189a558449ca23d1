"""What a richer prompt could carry: a reader of the bot's movement, searched on training episodes and played.

Table 10's prompt holds five numbers taken at one instant. A richer prompt
could add what a player sees between two decision points: how far the
nearest NPC is and whether the bot closed in, held or ran since the point
before (`jaxarena.llm.history.DecisionHistory`, the deduction prompt's features). Before an
LLM is taught to read such a prompt, this asks whether reading it can win.

A *history table* maps each decision's cell to a tag. The cells are the first
decision (nothing seen yet) and, after it, the nearest NPC's distance bin x
the bot's approach bin (`deduction`'s bins): 10 cells, so 4^10 tables.

- `search` improves a table by coordinate ascent on the squad's win rate
  summed over the bots, on training episodes. Those are the protocol's own
  keys of another seed (`seed + 1`), on purpose: a protocol run with that seed
  plays the very episodes the table was searched on (its first `--episodes`
  per bot are the search's first), so nothing is reported on them. A change
  is kept only if the sum rises by at least `min_gain` (1.5 points) and no bot
  loses more than `max_loss` (3 points): a gain must not be bought by giving
  up a bot.
- `play` plays a table on the protocol's paired keys (held out), beside
  always-Aggressive (what the stock LLM answers on `raid`), and the same
  table with its first decision set to each tag in turn: what the blind first
  decision is worth.

Pure JAX inside the rollout; the search itself is a host loop over tables,
each table a traced argument of one compiled rollout.

    python studies/history_bound.py --scenario raid --policy B-obey-raid --out runs/raid-history-bound
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.cli_errors import cli_main
from jaxarena.llm.deduction import (
    APPROACH_WORDS,
    DISTANCE_EDGES,
    NUM_APPROACH_BINS,
    NUM_DISTANCE_BINS,
    approach_bin,
    distance_bin,
)
from jaxarena.llm.history import APPROACH, NEAREST, DecisionHistory, blank_histories, push
from jaxarena.llm.tuning.paired_play import (
    run_study,
    squad_runner,
    study_parser,
    versus_always_aggressive,
    win_cell,
    write_result,
)
from jaxarena.names import BOT_TYPES, NPC_WIN, NUM_TAGS, TAG_NAMES
from jaxarena.tag_sources import TagSource

#: The first decision's cell: no movement has been seen yet.
FIRST = NUM_DISTANCE_BINS * NUM_APPROACH_BINS
NUM_CELLS = FIRST + 1
AGGRESSIVE = TAG_NAMES.index("Aggressive")


def cell_names() -> list[str]:
    """A readable name per cell, e.g. "nearest >= 10 u, the bot moved away from the squad"."""
    low, high = DISTANCE_EDGES
    edges = [f"< {low:g} u", f"{low:g}-{high:g} u", f">= {high:g} u"]
    names = [f"nearest {d}, {w}" for d in edges for w in APPROACH_WORDS]
    return [*names, "first decision"]


def decision_cell(history: DecisionHistory) -> jax.Array:
    """() int32: the cell of one arena's latest decision point (`push`ed already)."""
    point = history.points[-1]
    cell = distance_bin(point[NEAREST]) * NUM_APPROACH_BINS + approach_bin(point[APPROACH])
    # Only one point seen: the approach is undefined (0), so the cell is the first decision's.
    return jnp.where(history.valid[-2], cell, FIRST).astype(jnp.int32)


def table_source() -> TagSource:
    """A tag source whose carry is (table (NUM_CELLS,) int32, the batch's histories).

    Give the table as `run(..., tag_state=initial_carry(table, N))`: it is a
    traced argument, so every table runs in the same compiled rollout.
    """

    def step(carry, features, prev_tags, done, time_s, key, state=None, params=None):
        table, histories = carry
        histories = jax.vmap(push, in_axes=(0, 0, None))(histories, state, params)
        tags = table[jax.vmap(decision_cell)(histories)]
        return tags, None, (table, histories)

    return TagSource(step, lambda n: initial_carry(np.full(NUM_CELLS, AGGRESSIVE), n), reads_state=True)


def initial_carry(table: Sequence[int], num_episodes: int):
    table = np.asarray(table, np.int32)
    if table.shape != (NUM_CELLS,) or table.min() < 0 or table.max() >= NUM_TAGS:
        raise ValueError(f"a history table has {NUM_CELLS} tags in 0..{NUM_TAGS - 1}, got {table.tolist()}")
    return jnp.asarray(table), blank_histories(num_episodes)


def make_player(scenario: str, policy_spec: str, episodes: int, bots: Sequence[str] = BOT_TYPES):
    """`play(table, seed) -> {bot: wins (episodes,) float64}` on the protocol's keys of `seed`."""
    run = squad_runner(scenario, policy_spec, episodes, bots, table_source())

    def play(table, seed: int) -> dict[str, np.ndarray]:
        return {
            bot: np.asarray(run(bot, seed, initial_carry(table, episodes)).outcome == NPC_WIN, np.float64)
            for bot in bots
        }

    return play


def search(
    play: Callable[[Sequence[int], int], dict],
    *,
    seed: int,
    sweeps: int = 2,
    min_gain: float = 0.015,
    max_loss: float = 0.03,
    progress=print,
) -> tuple[list[int], dict[str, float]]:
    """Coordinate ascent from always-Aggressive on `play`'s episodes of `seed`; returns (table, win rate per bot)."""
    table = [AGGRESSIVE] * NUM_CELLS
    best = {bot: float(w.mean()) for bot, w in play(table, seed).items()}
    progress(f"start (always Aggressive): {_rates(best)}")
    for sweep in range(sweeps):
        changed = False
        for cell in range(NUM_CELLS):
            for tag in range(NUM_TAGS):
                if tag == table[cell]:
                    continue
                trial = table[:cell] + [tag] + table[cell + 1 :]
                rates = {bot: float(w.mean()) for bot, w in play(trial, seed).items()}
                gain = sum(rates.values()) - sum(best.values())
                worst = min(rates[bot] - best[bot] for bot in best)
                if gain >= min_gain and worst >= -max_loss:
                    table, best, changed = trial, rates, True
                    progress(f"sweep {sweep}: {cell_names()[cell]} -> {TAG_NAMES[tag]}: {_rates(best)}")
        if not changed:
            break
    return table, best


def _rates(rates: dict) -> str:
    return "  ".join(f"{bot} {100 * r:.1f}%" for bot, r in rates.items())


def held_out_report(play, table: Sequence[int], *, seed: int, n_boot: int = 10_000) -> dict:
    """`table`, always-Aggressive, and `table` with each first-decision tag, on the held-out keys of `seed`."""
    rows = {"always Aggressive": [AGGRESSIVE] * NUM_CELLS, "searched table": list(table)}
    for tag in range(NUM_TAGS):
        if tag != table[FIRST]:
            rows[f"searched table, first decision {TAG_NAMES[tag]}"] = [*table[:FIRST], tag]
    wins = {name: play(row, seed) for name, row in rows.items()}
    base = wins["always Aggressive"]
    report = {}
    for name, row in rows.items():
        bots = {bot: versus_always_aggressive(w, base[bot], n_boot=n_boot, seed=seed) for bot, w in wins[name].items()}
        report[name] = {"table": list(map(int, row)), "bots": bots}
    return report


def markdown(result: dict) -> str:
    names = cell_names()
    table = result["table"]
    lines = [
        f"Scenario `{result['scenario']}`, squad `{result['policy']}`. Table searched on {result['search_episodes']} "
        f"episodes per bot of the protocol's own keys of seed {result['search_seed']} (a protocol run of seed "
        f"{result['search_seed']} plays those episodes: none of the figures below is measured on them); played on "
        f"{result['episodes']} held-out paired episodes per bot of seed {result['seed']}.",
        "",
        "Searched table (cells that differ from Aggressive): "
        + (", ".join(f"{names[c]} -> {TAG_NAMES[t]}" for c, t in enumerate(table) if t != AGGRESSIVE) or "none"),
        "",
        "| reader | " + " | ".join(result["bots"]) + " |",
        "|---|" + "---|" * len(result["bots"]),
    ]
    for name, row in result["held_out"].items():
        lines.append(f"| {name} | " + " | ".join(win_cell(row["bots"][bot]) for bot in result["bots"]) + " |")
    lines += ["", "In brackets: the paired difference from always Aggressive, pp [95% CI]."]
    return "\n".join(lines) + "\n"


def run_history_bound(
    *,
    scenario: str,
    policy_spec: str,
    out: str,
    episodes: int = 100,
    search_episodes: int = 200,
    seed: int = 0,
    bots: Sequence[str] = BOT_TYPES,
    progress=print,
) -> dict:
    """Search a table on seed + 1's episodes, play it on seed's, write history_bound.json and .md."""
    search_play = make_player(scenario, policy_spec, search_episodes, bots)
    table, train_rates = search(search_play, seed=seed + 1, progress=progress)
    held_out = held_out_report(make_player(scenario, policy_spec, episodes, bots), table, seed=seed)
    result = {
        "scenario": scenario,
        "policy": policy_spec,
        "bots": list(bots),
        "episodes": episodes,
        "seed": seed,
        "search_episodes": search_episodes,
        "search_seed": seed + 1,
        "cells": cell_names(),
        "table": list(map(int, table)),
        "search_win_pct": {bot: 100 * r for bot, r in train_rates.items()},
        "held_out": held_out,
    }
    write_result(out, "history_bound", result, markdown)
    return result


def parser():
    p = study_parser("history_bound.py", __doc__, "history_bound", held_out=True)
    p.add_argument(
        "--search-episodes",
        type=int,
        default=200,
        help="training episodes per bot of the search (the protocol's keys of seed + 1)",
    )
    return p


@cli_main("history_bound.py")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    counts = ("episodes", "search_episodes")
    return run_study(
        "history_bound.py",
        args,
        run_history_bound,
        markdown,
        "history_bound",
        counts,
        search_episodes=args.search_episodes,
    )


if __name__ == "__main__":
    sys.exit(main())

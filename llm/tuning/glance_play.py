"""What a glance table is worth: tables of answers, from adapters or written out, played on held-out episodes.

A glance LLM plays its table of most likely answers (one tag per glance
prompt), so a table is the whole of what it does in the game. This plays
any number of tables beside always Aggressive on the protocol's paired
episodes. At 100 episodes per bot a paired difference's standard error is
about 5 points, as large as the differences between learned tables; 1,000
episodes bring it under 2 and cost seconds here.

A table is written as 18 tag initials in the order of `glance_prompts()`
(S Surround, A Aggressive, F Flank, R Retreat), e.g. AAAAAAAAAAAAAARFAF,
or named by a glance adapter (a shipped name or a directory), whose most
likely answers it reads.

    jaxarena-tune-llm glance-play --tables smollm2-raid-glance AAAAAAAARAAAAAAFAA --episodes 1000 --out runs/play
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxarena.names import TAG_NAMES

from ..glance import GLANCE_PERIOD_S, NUM_GLANCE_CELLS
from .glance_report import load_glance_table, play_tables, played_on
from .history_bound import win_cell, write_result

#: A table's letters: each tag's initial, in tag order.
INITIALS = "".join(name[0] for name in TAG_NAMES)


def parse_table(spec: str) -> np.ndarray:
    """(NUM_GLANCE_CELLS,) int32 answers from 18 tag initials, or from a glance adapter's name or directory.

    Raises ValueError for letters that are not a table, `AdapterError` for a missing or foreign adapter.
    """
    if not is_written_table(spec):
        return load_glance_table(spec)[0]
    letters = spec.upper()
    if len(letters) != NUM_GLANCE_CELLS:
        raise ValueError(f"a table is {NUM_GLANCE_CELLS} tag initials ({INITIALS}); {spec!r} has {len(spec)}")
    wrong = sorted(set(letters) - set(INITIALS))
    if wrong:
        raise ValueError(f"a table is {NUM_GLANCE_CELLS} tag initials ({INITIALS}); {spec!r} has {', '.join(wrong)}")
    return np.asarray([INITIALS.index(c) for c in letters], np.int32)


def is_written_table(spec: str) -> bool:
    """Whether `spec` is meant as a table of initials, not an adapter: letters only, either all tag initials or
    as many as a table has, and no such directory (adapter names hold a hyphen)."""
    if Path(spec).exists() or not spec.isalpha():
        return False
    return set(spec.upper()) <= set(INITIALS) or len(spec) == NUM_GLANCE_CELLS


def initials(table) -> str:
    return "".join(INITIALS[int(t)] for t in table)


def play(specs, *, scenario: str, policy_spec: str, bots, episodes: int, seed: int, n_boot: int = 10_000) -> dict:
    """Play always Aggressive and every table in `specs` on `episodes` paired episodes per bot of `seed`."""
    tables = {spec: parse_table(spec) for spec in specs}
    readers, _ = play_tables(scenario, policy_spec, bots, tables, episodes=episodes, seed=seed, n_boot=n_boot)
    return {
        "scenario": scenario,
        "policy": policy_spec,
        "episodes": episodes,
        "seed": seed,
        "decision_period_s": GLANCE_PERIOD_S,
        "bots": list(bots),
        "tables": {name: initials(tables[name]) for name in tables},
        "readers": readers,
    }


def markdown(result: dict) -> str:
    bots = result["bots"]
    lines = [
        played_on(result, held_out=""),
        "",
        "| table | answers (S A F R per glance prompt) | " + " | ".join(bots) + " |",
        "|---|---|" + "---|" * len(bots),
    ]
    answers = {"always Aggressive": "A" * NUM_GLANCE_CELLS, **result["tables"]}
    for name, row in result["readers"].items():
        lines.append(f"| {name} | {answers[name]} | " + " | ".join(win_cell(row[bot]) for bot in bots) + " |")
    lines += ["", "In brackets: the paired difference from always Aggressive, pp [95% CI]."]
    return "\n".join(lines) + "\n"


def run_glance_play(*, out: str, tables, **kwargs) -> dict:
    """`play(tables, **kwargs)`, written to OUT/glance_play.json and .md."""
    result = play(tables, **kwargs)
    write_result(out, "glance_play", result, markdown)
    return result

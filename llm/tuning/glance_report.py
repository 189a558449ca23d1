"""The glance LLM played: the stock and the tuned model's answers on held-out paired episodes.

Each model's table is its most likely answer to every glance prompt
(`glance_model.greedy_table`); a run of the table learner (`glance_learner`)
plays its prior and its tuned table the same way. Both are played at the glance period on the
protocol's keys of `seed` (episodes never used in training), beside always
Aggressive: what the stock LLM answers to Table 10's prompt on `raid`, so the
squad B of the paper's protocol. Per bot: win rates with CIs, paired
differences, the share of each tag over the decisions made, and the mean
episode length (a gain bought by stalling would show there).

A table is also written by hand as 18 tag initials in the order of
`glance_prompts()` (S Surround, A Aggressive, F Flank, R Retreat), e.g.
AAAAAAAAAAAAAARFAF, or named by a glance adapter (`parse_table`), so the
studies in `studies/` play and perturb any table the same way.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from jaxarena.names import NPC_WIN, NUM_TAGS, TAG_NAMES

from ..glance import AGGRESSIVE, GLANCE_PERIOD_S, NUM_GLANCE_CELLS, glance_prompts, glance_source, initial_carry
from ..glance_model import greedy_table, load_glance_table, save_glance_table
from ..lora import save_adapter
from .glance import GlanceConfig
from .glance_learner import as_learner
from .paired_play import squad_runner, versus_always_aggressive, win_cell, write_result

#: A table's letters: each tag's initial, in tag order.
INITIALS = "".join(name[0] for name in TAG_NAMES)


def glance_report(
    model, adapter, *, config: GlanceConfig, episodes: int = 1000, seed: int = 0, n_boot: int = 10_000
) -> dict:
    """Play always Aggressive, the stock and the tuned LLM's glance tables on the protocol's keys of `seed`.

    `model`: the `GlanceModel` (or a learner, `glance_learner`) and `adapter` its learned parameters; a table
    learner's rows are named "prior table" and "tuned table" where an LLM's are "stock LLM" and "tuned LLM".
    """
    learner = as_learner(model, config)
    stock, tuned = learner.labels
    logits = jax.jit(learner.logits)
    probs = {
        name: np.asarray(jax.nn.softmax(logits(learner.frozen, a), -1)) for name, a in ((stock, None), (tuned, adapter))
    }
    tables = {name: greedy_table(p) for name, p in probs.items()}
    readers, wins = play_tables(
        config.scenario, config.policy, config.bots, tables, episodes=episodes, seed=seed, n_boot=n_boot
    )
    for bot in config.bots:
        tuned_minus_stock = versus_always_aggressive(wins[tuned][bot], wins[stock][bot], n_boot=n_boot, seed=seed)
        readers[tuned][bot][minus_untrained(learner.name)] = tuned_minus_stock["minus_always_aggressive"]
    cells = [
        {
            "prompt": prompt,
            "stock_probs": probs[stock][c].round(4).tolist(),
            "tuned_probs": probs[tuned][c].round(4).tolist(),
            "stock_tag": TAG_NAMES[tables[stock][c]],
            "tuned_tag": TAG_NAMES[tables[tuned][c]],
        }
        for c, prompt in enumerate(glance_prompts())
    ]
    return {
        "learner": learner.name,
        "labels": [stock, tuned],
        "scenario": config.scenario,
        "policy": config.policy,
        "episodes": episodes,
        "seed": seed,
        "decision_period_s": GLANCE_PERIOD_S,
        "bots": list(config.bots),
        "readers": readers,
        "cells": cells,
    }


def play_tables(
    scenario: str, policy: str, bots, tables: dict, *, episodes: int, seed: int, n_boot: int = 10_000
) -> tuple[dict, dict]:
    """Play always Aggressive and each named glance table on the protocol's keys of `seed`, paired.

    Returns ({name: {bot: row}}, {name: {bot: (episodes,) 0/1 wins}}); a row holds the win % with its CI, the
    paired difference from always Aggressive (pp, CI), the tags' shares of the decisions made, the mean duration.
    """
    tables = {"always Aggressive": np.full(NUM_GLANCE_CELLS, AGGRESSIVE, np.int32), **tables}
    run = squad_runner(scenario, policy, episodes, bots, glance_source(), decision_period_s=GLANCE_PERIOD_S)
    readers, wins = {name: {} for name in tables}, {name: {} for name in tables}
    for bot in bots:
        results = {name: run(bot, seed, initial_carry(np.asarray(t, np.int32), episodes)) for name, t in tables.items()}
        for name, result in results.items():
            wins[name][bot] = np.asarray(result.outcome == NPC_WIN, np.float64)
        for name, result in results.items():
            tags = np.asarray(result.decision_tags)[np.asarray(result.decision_active)]
            readers[name][bot] = {
                **versus_always_aggressive(wins[name][bot], wins["always Aggressive"][bot], n_boot=n_boot, seed=seed),
                "tag_shares": {TAG_NAMES[t]: float(np.mean(tags == t)) for t in range(NUM_TAGS)},
                "mean_duration_s": float(np.mean(np.asarray(result.duration_s))),
            }
    return readers, wins


def played_on(result: dict, held_out: str = "held-out ") -> str:
    """The first line of a glance play's report: the squad, the arena, the period and the episodes."""
    return (
        f"Scenario `{result['scenario']}`, squad `{result['policy']}`, a glance every {result['decision_period_s']:g} "
        f"s, {result['episodes']} {held_out}paired episodes per bot (the protocol's keys of seed {result['seed']})."
    )


def minus_untrained(learner: str) -> str:
    """The key of the tuned minus the untrained learner's paired difference: the stock LLM's, or the prior's."""
    return "minus_stock_llm" if learner == "llm" else "minus_prior"


def markdown(result: dict) -> str:
    bots = result["bots"]
    stock, tuned_name = result["labels"]
    minus = minus_untrained(result["learner"])
    lines = [
        played_on(result) + " Each learner answers every glance prompt with its most likely tag.",
        "",
        "| reader | " + " | ".join(bots) + " |",
        "|---|" + "---|" * len(bots),
    ]
    for name, row in result["readers"].items():
        cells = []
        for bot in bots:
            shares = ", ".join(f"{tag} {100 * s:.0f}%" for tag, s in row[bot]["tag_shares"].items() if s >= 0.005)
            cells.append(f"{win_cell(row[bot])}; {shares}; {row[bot]['mean_duration_s']:.0f} s")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    tuned = result["readers"][tuned_name]
    lines += [
        "",
        "In brackets: the paired difference from always Aggressive (= B under the stock LLM with Table 10's prompt), "
        "pp [95% CI]; then the tags' shares of the decisions made and the mean duration.",
        f"{tuned_name[0].upper()}{tuned_name[1:]} minus {stock} on the glance prompt: "
        + "; ".join(f"{bot} {d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]" for bot in bots for d in [tuned[bot][minus]]),
        "",
        "| glance prompt | stock answer | tuned answer (p) |",
        "|---|---|---|",
    ]
    for cell in result["cells"]:
        p = max(cell["tuned_probs"])
        lines.append(f"| {cell['prompt']} | {cell['stock_tag']} | {cell['tuned_tag']} ({p:.2f}) |")
    return "\n".join(lines) + "\n"


def played_section(result: dict) -> dict:
    """The card's record of the held-out play: the squad, the arena, the tuned answer to each glance prompt, and
    each LLM's win rate with its 95% CI."""
    return {
        "table": [cell["tuned_tag"] for cell in result["cells"]],
        "scenario": result["scenario"],
        "squad": result["policy"],
        "episodes_per_bot": result["episodes"],
        "seed": result["seed"],
        "by_bot": {
            bot: {
                f"{who}_{field}": result["readers"][reader][bot][key]
                for who, reader in zip(("stock", "tuned"), result["labels"], strict=True)
                for field, key in (("win_pct", "win_pct"), ("ci95", "win_ci"))
            }
            for bot in result["bots"]
        },
    }


#: What a glance run's card says it holds, per learner.
ABOUT = {
    "llm": "SmolLM2-135M answering the glance prompt (time since the fight began, nearest-NPC distance, the "
    "bot's approach since the last glance, every 0.2 s), trained on the game's group-relative advantages: every "
    "answer played in the asked cell, the KL-regularized best answers fit by cross-entropy",
    "table": "an 18 x 4 table of logits answering the glance prompt (one row per prompt, no LLM), trained by the "
    "glance algorithm on the game's group-relative advantages: every answer played in the asked cell, the "
    "KL-regularized best answers fit by cross-entropy",
}


def finish(model, adapter, config: GlanceConfig, out: str | Path, history: list, **play) -> dict:
    """Play the report, write OUT/glance.json and .md, and save the learned answers with their card: the LLM's
    adapter to OUT/adapter, a table learner's table to OUT/table (both play by `load_glance_table`)."""
    out = Path(out)
    learner = as_learner(model, config)
    result = glance_report(learner, adapter, config=config, **play)
    write_result(out, "glance", result, markdown)
    tuned = result["readers"][result["labels"][1]]
    minus = minus_untrained(learner.name)
    card = {
        "kind": "glance-adapter",
        "method": "glance",
        "prompt": "glance",
        "decision_period_s": GLANCE_PERIOD_S,
        "about": ABOUT[learner.name],
        "config": config.to_json(),
        "steps": len(history),
        "evaluation": {
            "episodes_per_bot": result["episodes"],
            "seed": result["seed"],
            "minus_always_aggressive": {bot: tuned[bot]["minus_always_aggressive"] for bot in result["bots"]},
            minus: {bot: tuned[bot][minus] for bot in result["bots"]},
        },
        "played": played_section(result),
    }
    if learner.name == "table":
        save_glance_table(out / "table", adapter, card)
    else:
        model = learner.model
        save_adapter(out / "adapter", adapter, model.lora, base_sha256=model.base_sha256, card=card)
    return result


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
    """A table as its 18 tag initials, the form `parse_table` reads."""
    return "".join(INITIALS[int(t)] for t in table)


def check_tables(specs) -> None:
    """An adapter's answers come from the embedded model: stop before any play if its weights are missing."""
    if not all(map(is_written_table, specs)):
        from ..backends.embedded import EmbeddedBackend
        from ..preflight import preflight

        preflight(EmbeddedBackend())

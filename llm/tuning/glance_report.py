"""The glance LLM played: the stock and the tuned model's answers on held-out paired episodes.

Each model's table is its most likely answer to every glance prompt
(`glance.greedy_table`). Both are played at the glance period on the
protocol's keys of `seed` (episodes never used in training), beside always
Aggressive: what the stock LLM answers to Table 10's prompt on `raid`, so the
squad B of the paper's protocol. Per bot: win rates with CIs, paired
differences, the share of each tag over the decisions made, and the mean
episode length (a gain bought by stalling would show there).
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from jaxarena.names import NPC_WIN, NUM_TAGS, TAG_NAMES

from ..glance import AGGRESSIVE, GLANCE_PERIOD_S, NUM_GLANCE_CELLS, glance_prompts, glance_source, initial_carry
from ..lora import save_adapter
from .glance import GlanceConfig, GlanceModel, greedy_table
from .history_bound import squad_runner, versus_always_aggressive, win_cell, write_result


def glance_report(
    model: GlanceModel, adapter, *, config: GlanceConfig, episodes: int = 1000, seed: int = 0, n_boot: int = 10_000
) -> dict:
    """Play always Aggressive, the stock and the tuned LLM's glance tables on the protocol's keys of `seed`."""
    logits = jax.jit(model.logits)
    probs = {
        name: np.asarray(jax.nn.softmax(logits(model.base, a), -1))
        for name, a in (("stock LLM", None), ("tuned LLM", adapter))
    }
    tables = {name: greedy_table(p) for name, p in probs.items()}
    readers, wins = play_tables(
        config.scenario, config.policy, config.bots, tables, episodes=episodes, seed=seed, n_boot=n_boot
    )
    for bot in config.bots:
        tuned_minus_stock = versus_always_aggressive(
            wins["tuned LLM"][bot], wins["stock LLM"][bot], n_boot=n_boot, seed=seed
        )
        readers["tuned LLM"][bot]["minus_stock_llm"] = tuned_minus_stock["minus_always_aggressive"]
    cells = [
        {
            "prompt": prompt,
            "stock_probs": probs["stock LLM"][c].round(4).tolist(),
            "tuned_probs": probs["tuned LLM"][c].round(4).tolist(),
            "stock_tag": TAG_NAMES[tables["stock LLM"][c]],
            "tuned_tag": TAG_NAMES[tables["tuned LLM"][c]],
        }
        for c, prompt in enumerate(glance_prompts())
    ]
    return {
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


def markdown(result: dict) -> str:
    bots = result["bots"]
    lines = [
        played_on(result) + " Each LLM answers every glance prompt with its most likely tag.",
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
    tuned = result["readers"]["tuned LLM"]
    lines += [
        "",
        "In brackets: the paired difference from always Aggressive (= B under the stock LLM with Table 10's prompt), "
        "pp [95% CI]; then the tags' shares of the decisions made and the mean duration.",
        "Tuned minus stock LLM on the glance prompt: "
        + "; ".join(
            f"{bot} {d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]" for bot in bots for d in [tuned[bot]["minus_stock_llm"]]
        ),
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
                for who, reader in (("tuned", "tuned LLM"), ("stock", "stock LLM"))
                for field, key in (("win_pct", "win_pct"), ("ci95", "win_ci"))
            }
            for bot in result["bots"]
        },
    }


def finish(model: GlanceModel, adapter, config: GlanceConfig, out: str | Path, history: list, **play) -> dict:
    """Play the report, write OUT/glance.json and .md, and save the adapter with its card to OUT/adapter."""
    out = Path(out)
    result = glance_report(model, adapter, config=config, **play)
    write_result(out, "glance", result, markdown)
    tuned = result["readers"]["tuned LLM"]
    card = {
        "kind": "glance-adapter",
        "method": "glance",
        "prompt": "glance",
        "decision_period_s": GLANCE_PERIOD_S,
        "about": "SmolLM2-135M answering the glance prompt (time since the fight began, nearest-NPC distance, the "
        "bot's approach since the last glance, every 0.2 s), trained on the game's group-relative advantages: every "
        "answer played in the asked cell, the KL-regularized best answers fit by cross-entropy",
        "config": config.to_json(),
        "steps": len(history),
        "evaluation": {
            "episodes_per_bot": result["episodes"],
            "seed": result["seed"],
            "minus_always_aggressive": {bot: tuned[bot]["minus_always_aggressive"] for bot in result["bots"]},
            "minus_stock_llm": {bot: tuned[bot]["minus_stock_llm"] for bot in result["bots"]},
        },
        "played": played_section(result),
    }
    save_adapter(out / "adapter", adapter, model.lora, base_sha256=model.base_sha256, card=card)
    return result


def load_glance_table(spec: str) -> tuple[np.ndarray, str]:
    """(the table of a glance adapter's most likely answers, the adapter's checksum); `spec` a name or a directory.

    Raises `AdapterError` for a missing, corrupt or foreign adapter (one for Table 10's prompt, or another model).
    """
    from ..adapters import resolve_adapter
    from ..backends.embedded import EmbeddedBackend
    from ..lora import load_adapter

    directory = resolve_adapter(spec, kind="glance-adapter")
    generator = EmbeddedBackend().load()
    loaded = load_adapter(directory, generator.cfg, generator.sha256)
    model = GlanceModel(generator, loaded.lora)
    return greedy_table(jax.jit(model.logits)(model.base, loaded.adapter)), loaded.checksum

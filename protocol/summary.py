"""From finished cells to `results/<run-id>/`: summary.json, episodes.csv, decisions.jsonl (and the report).

Everything is computed from the cells (`protocol.runner`) with
`protocol.stats`; `write_outputs` writes every file of a run atomically,
with the text from `protocol.tables` and the figures from `protocol.figures`.
The paper's frame (Tables 6-9: A and B, their Mann-Whitney test, B's tags)
is in every summary; the combinations add their own sections
(`protocol.combinations.sections`: the oracle's headroom, the white-box
squads, the RL selector, ...), each computed by its section's `summarize`.
"""

from __future__ import annotations

import csv
import io
import json
import platform
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from jaxarena.files import write_atomic
from jaxarena.names import DECISION_PERIOD_S, DT, FALLBACK_REASONS, NUM_TAGS

from . import findings, stats
from .combination import Results
from .config import ProtocolConfig, episode_sets
from .figures import make_figures
from .tables import PAPER_TABLE6, PAPER_TABLE7, PAPER_TABLE8, PAPER_TABLE9, render_report

EPISODE_COLUMNS = (
    "combination",
    "bot",
    "episode",
    "seed",
    "episode_key",
    "outcome",
    "outcome_name",
    "duration_s",
    "damage_dealt",
    "damage_taken",
    "team_return",
    *(f"steps_tag{t}" for t in range(NUM_TAGS)),
    "decisions",
    "fallbacks",
)


def episode_rows(cells: dict[str, dict], seed: int) -> list[dict]:
    """One row per episode, in cell order then episode order (the episodes.csv rows)."""
    rows = []
    for cell in cells.values():
        per_episode = Counter(d["episode"] for d in cell["decisions"])
        fallbacks = Counter(d["episode"] for d in cell["decisions"] if d.get("fallback"))
        for label, e in episode_sets(cell):
            rows.extend(_rows(label, cell["bot"], e, seed, per_episode, fallbacks))
    return rows


def _rows(label: str, bot: str, e: dict, seed: int, per_episode: Counter, fallbacks: Counter) -> list[dict]:
    """The rows of one episode set: a cell's, or one of F's held tags (labelled "F0".."F3")."""
    rows = []
    for i, outcome in enumerate(e["outcome"]):
        steps = e["tag_steps"][i]
        rows.append(
            {
                "combination": label,
                "bot": bot,
                "episode": i,
                "seed": seed,
                "episode_key": e["episode_key"][i],
                "outcome": outcome,
                "outcome_name": stats.OUTCOME_NAMES[outcome],
                "duration_s": e["duration_s"][i],
                "damage_dealt": e["damage_dealt"][i],
                "damage_taken": e["damage_taken"][i],
                "team_return": e["team_return"][i],
                **{f"steps_tag{t}": steps[t] for t in range(NUM_TAGS)},
                "decisions": per_episode.get(i, 0),
                "fallbacks": fallbacks.get(i, 0),
            }
        )
    return rows


def episodes_csv(rows: Sequence[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=EPISODE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def decisions_jsonl(cells: dict[str, dict]) -> str:
    return "".join(json.dumps(d) + "\n" for cell in cells.values() for d in cell["decisions"])


def versions() -> dict:
    """Versions of everything that can change the numbers."""
    import importlib.metadata as md

    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for pkg in ("jaxarena", "jax", "jaxlib", "flax", "numpy", "scipy", "orbax-checkpoint", "ollama"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    try:
        import jax

        out["jax_devices"] = [str(d) for d in jax.devices()]
    except Exception as exc:  # noqa: BLE001 - a version report must not fail
        out["jax_devices"] = f"unavailable: {exc}"
    return out


def _sum_dicts(items: Sequence[dict]) -> dict:
    total: dict = {}
    for item in items:
        for k, v in item.items():
            if isinstance(v, dict):
                total[k] = _sum_dicts([total.get(k, {}), v])
            elif isinstance(v, list):
                prev = total.get(k, [0] * len(v))
                total[k] = [a + b for a, b in zip(prev, v, strict=True)]
            else:
                total[k] = total.get(k, 0) + v
    return total


def summarize(cells: dict[str, dict], config: ProtocolConfig, meta: dict) -> dict:
    """All numbers of a run. `meta`: run_id, policies, llm, session timings (see cli)."""
    by = defaultdict(dict)  # combination -> bot -> cell
    for cell in cells.values():
        by[cell["combination"]][cell["bot"]] = cell

    descriptive: dict = {}
    for per_bot in by.values():
        for bot, cell in per_bot.items():
            for label, e in episode_sets(cell):
                row = stats.describe(e["duration_s"], e["outcome"])
                row["ci95"] = stats.outcome_cis(e["outcome"], n_boot=config.n_boot, seed=config.seed)
                descriptive.setdefault(label, {})[bot] = row

    mann_whitney = {}
    for bot in config.bots:
        if bot in by.get("A", {}) and bot in by.get("B", {}):
            mann_whitney[bot] = stats.mann_whitney(
                by["A"][bot]["episodes"]["duration_s"], by["B"][bot]["episodes"]["duration_s"]
            )

    b_cells = list(by.get("B", {}).values())
    all_decisions = [d for c in b_cells for d in c["decisions"]]
    tags = {
        "overall": stats.tag_frequency([d["tag"] for d in all_decisions]),
        # Tags from usable replies only (a fallback's tag is the previous one, not a choice).
        "replied": stats.tag_frequency([d["tag"] for d in all_decisions if not d.get("fallback")]),
        "by_bot": {c["bot"]: stats.tag_frequency([d["tag"] for d in c["decisions"]]) for c in b_cells},
        # What the model preferred, where the backend reports it (choice decoding of the embedded model).
        "probs": {
            "overall": stats.choice_probabilities([d["probs"] for d in all_decisions if d.get("probs")]),
            "by_bot": {
                c["bot"]: stats.choice_probabilities([d["probs"] for d in c["decisions"] if d.get("probs")])
                for c in b_cells
            },
        },
    }

    def fallback_counts(decisions):
        counts = Counter(d["fallback"] for d in decisions if d.get("fallback"))
        return {r: counts.get(r, 0) for r in FALLBACK_REASONS} | {"total": sum(counts.values())}

    fallbacks = {
        "overall": fallback_counts(all_decisions),
        "by_bot": {c["bot"]: fallback_counts(c["decisions"]) for c in b_cells},
    }
    llm_counters = _sum_dicts([c["llm"] for c in b_cells if c.get("llm")]) if b_cells else {}
    llm_counters["distinct_prompts"] = len({d["prompt_hash"] for d in all_decisions})

    timing_keys = ("compile_s", "simulation_s", "llm_s", "wall_s")
    timings = {f"cells_{k}": sum(c["timing"][k] for c in cells.values()) for k in timing_keys}
    timings["per_cell"] = {name: c["timing"] for name, c in cells.items()}
    priced = [c["timing"]["pricing"] for c in cells.values() if "pricing" in c["timing"]]
    if priced:
        timings["cells_pricing_s"] = sum(p["wall_s"] for p in priced)
        timings["cells_pricing_compile_s"] = sum(p["compile_s"] for p in priced)
    timings.update(meta.get("session", {}))

    return {
        "run_id": meta.get("run_id"),
        "created": meta.get("created"),
        "config": config.as_dict(),
        "protocol": {
            "episode_s": config.episode_s,
            "decision_period_s": DECISION_PERIOD_S,
            "dt": DT,
            "time_to_defeat": f"episode length in s for every episode (timeouts count as {config.episode_s:g} s)",
            "std": "sample std (ddof=1)",
            "mann_whitney": "scipy.stats.mannwhitneyu(A, B, two-sided); U is A's statistic",
            "effect_size": "r = Z/sqrt(N), Z from U_B with tie correction; r_rb = 1 - 2U/(n1 n2); "
            "both < 0 when B is shorter (the paper's r equals r_rb)",
            "ci": f"percentile bootstrap, {config.n_boot} resamples, 95 %, seeded",
        },
        "seeds": {
            "seed": config.seed,
            "cell_keys": {name: c["key"] for name, c in cells.items()},
            "paired": "A and B cells of a bot share the key, so episode i meets the same spawns",
        },
        "policies": meta.get("policies", {}),
        "llm": meta.get("llm"),
        "versions": versions(),
        "descriptive": descriptive,
        "mann_whitney": mann_whitney,
        "findings": findings.findings(by, mann_whitney, config.n_boot, config.seed),
        "tags": tags,
        "fallbacks": fallbacks,
        "llm_counters": llm_counters,
        "timings": timings,
        **sections(Results(dict(by), descriptive, config, meta)),
        "paper": {"table6": PAPER_TABLE6, "table7": PAPER_TABLE7, "table8": PAPER_TABLE8, "table9": PAPER_TABLE9},
    }


def sections(results: Results) -> dict:
    """The combinations' sections that apply to the run, by their summary.json key, in rank order."""
    from .combinations import sections as all_sections

    return {s.key: s.summarize(results) for s in all_sections(results.config)}


def write_outputs(
    run_dir: str | Path, cells: dict[str, dict], config: ProtocolConfig, meta: dict, figures: bool = True
) -> dict:
    """Writes every output file of a run (atomically); returns the summary."""
    run_dir = Path(run_dir)
    summary = summarize(cells, config, meta)
    # The run's settings alone, so that `jaxarena-evaluate --config RUN/config.json` plays the run again.
    write_atomic(run_dir / "config.json", json.dumps(config.as_dict(), indent=2))
    write_atomic(run_dir / "episodes.csv", episodes_csv(episode_rows(cells, config.seed)))
    write_atomic(run_dir / "decisions.jsonl", decisions_jsonl(cells))
    fig_paths = make_figures(run_dir, summary, cells) if figures else []
    summary["figures"] = [Path(p).name for p in fig_paths]
    write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2))
    write_atomic(run_dir / "report.md", render_report(summary, fig_paths))
    return summary

"""From finished cells to `results/<run-id>/`: summary.json, episodes.csv, decisions.jsonl, report.md, figures.

Everything is computed from the cells (`protocol.run`) with `protocol.stats`;
the paper's own numbers (Tables 6-9) are kept here as constants and printed
beside ours. Every file is written atomically (temp file + rename).
"""

from __future__ import annotations

import csv
import io
import json
import math
import platform
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import stats
from .run import BOTS, ProtocolConfig, write_atomic

TAG_NAMES = ("Surround", "Aggressive", "Flank", "Retreat")
FALLBACK_REASONS = ("empty", "non_numeric", "out_of_range", "error")

# The paper's numbers (n = 100 per bot type), for reference in the report.
# Columns: mean, median, std (s), NPC win %, bot win %, timeout %.
PAPER_TABLE6 = {  # Combination A
    "aggressive": (77.72, 80.03, 22.51, 8.0, 90.0, 2.0),
    "evasive": (78.31, 73.42, 21.12, 90.0, 1.0, 9.0),
    "balanced": (104.08, 120.00, 22.21, 11.0, 29.0, 60.0),
}
PAPER_TABLE7 = {  # Combination B
    "aggressive": (66.54, 61.98, 26.51, 8.0, 84.0, 8.0),
    "evasive": (70.48, 67.15, 16.21, 93.0, 3.0, 4.0),
    "balanced": (105.82, 120.01, 22.71, 24.0, 14.0, 62.0),
}
# U, p, stars, r (the paper's r equals the rank-biserial 1 - 2U/(n1 n2)), direction.
PAPER_TABLE8 = {
    "aggressive": (6430.5, 0.0005, "***", -0.286, "B shorter"),
    "evasive": (6032.0, 0.0117, "*", -0.206, "B shorter"),
    "balanced": (3668.5, 0.0011, "**", 0.266, "B longer"),
}
PAPER_TABLE9 = {"counts": (2036, 103, 107, 184), "pct": (83.8, 4.2, 4.4, 7.6), "total": 2430}

EPISODE_COLUMNS = (
    "combination", "bot", "episode", "seed", "episode_key", "outcome", "outcome_name", "duration_s",
    "damage_dealt", "damage_taken", "team_return", "steps_tag0", "steps_tag1", "steps_tag2", "steps_tag3",
    "decisions", "fallbacks",
)


# --------------------------------------------------------------------------- tables of rows


def episode_rows(cells: dict[str, dict], seed: int) -> list[dict]:
    """One row per episode, in cell order then episode order (the episodes.csv rows)."""
    rows = []
    for cell in cells.values():
        e = cell["episodes"]
        per_episode = Counter(d["episode"] for d in cell["decisions"])
        fallbacks = Counter(d["episode"] for d in cell["decisions"] if d.get("fallback"))
        for i, outcome in enumerate(e["outcome"]):
            steps = e["tag_steps"][i]
            rows.append({
                "combination": cell["combination"],
                "bot": cell["bot"],
                "episode": i,
                "seed": seed,
                "episode_key": e["episode_key"][i],
                "outcome": outcome,
                "outcome_name": stats.OUTCOME_NAMES[outcome],
                "duration_s": e["duration_s"][i],
                "damage_dealt": e["damage_dealt"][i],
                "damage_taken": e["damage_taken"][i],
                "team_return": e["team_return"][i],
                **{f"steps_tag{t}": steps[t] for t in range(4)},
                "decisions": per_episode.get(i, 0),
                "fallbacks": fallbacks.get(i, 0),
            })
    return rows


def episodes_csv(rows: Sequence[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=EPISODE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def decisions_jsonl(cells: dict[str, dict]) -> str:
    return "".join(json.dumps(d) + "\n" for cell in cells.values() for d in cell["decisions"])


# --------------------------------------------------------------------------- summary


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
                total[k] = [a + b for a, b in zip(prev, v)]
            else:
                total[k] = total.get(k, 0) + v
    return total


def summarize(cells: dict[str, dict], config: ProtocolConfig, meta: dict) -> dict:
    """All numbers of a run. `meta`: run_id, policies, llm, session timings (see cli)."""
    by = defaultdict(dict)  # combination -> bot -> cell
    for cell in cells.values():
        by[cell["combination"]][cell["bot"]] = cell

    descriptive: dict = {}
    for comb, per_bot in by.items():
        descriptive[comb] = {}
        for bot, cell in per_bot.items():
            e = cell["episodes"]
            row = stats.describe(e["duration_s"], e["outcome"])
            row["ci95"] = stats.outcome_cis(e["outcome"], n_boot=config.n_boot, seed=config.seed)
            descriptive[comb][bot] = row

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
    timings.update(meta.get("session", {}))

    return {
        "run_id": meta.get("run_id"),
        "created": meta.get("created"),
        "config": config.as_dict(),
        "protocol": {
            "episode_s": 120.0, "decision_period_s": 5.0, "dt": 0.1,
            "time_to_defeat": "episode length in s for every episode (timeouts count as 120 s)",
            "std": "sample std (ddof=1)",
            "mann_whitney": "scipy.stats.mannwhitneyu(A, B, two-sided); U is A's statistic",
            "effect_size": "r = Z/sqrt(N), Z from U_B with tie correction; r_rb = 1 - 2U/(n1 n2); "
                           "both < 0 when B is shorter (the paper's r equals r_rb)",
            "ci": f"percentile bootstrap, {config.n_boot} resamples, 95 %, seeded",
        },
        "seeds": {"seed": config.seed,
                  "cell_keys": {name: c["key"] for name, c in cells.items()},
                  "paired": "A and B cells of a bot share the key, so episode i meets the same spawns"},
        "policies": meta.get("policies", {}),
        "llm": meta.get("llm"),
        "versions": versions(),
        "descriptive": descriptive,
        "mann_whitney": mann_whitney,
        "tags": tags,
        "fallbacks": fallbacks,
        "llm_counters": llm_counters,
        "timings": timings,
        "paper": {"table6": PAPER_TABLE6, "table7": PAPER_TABLE7, "table8": PAPER_TABLE8, "table9": PAPER_TABLE9},
    }


# --------------------------------------------------------------------------- report.md


def _p(p: float) -> str:
    return f"{p:.2e}" if p < 1e-4 else f"{p:.4f}"


def _desc_table(title: str, ours: dict, paper: dict) -> list[str]:
    lines = [f"### {title}", "",
             ("| Bot Type | Source | Mean (s) | Median (s) | Std (s) | NPC Win % | Bot Win % | Timeout % "
              "| NPC Win 95% CI | Bot Win 95% CI | Timeout 95% CI |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for bot in BOTS:
        if bot in ours:
            r = ours[bot]
            ci = r["ci95"]
            lines.append(
                f"| {bot.capitalize()} | ours (n={r['n']}) | {r['mean_s']:.2f} | {r['median_s']:.2f} | {r['std_s']:.2f} "
                f"| {r['npc_win_pct']:.1f}% | {r['bot_win_pct']:.1f}% | {r['timeout_pct']:.1f}% "
                + "".join(f"| {ci[k][0]:.1f}–{ci[k][1]:.1f} " for k in ("npc_win", "bot_win", "timeout")) + "|"
            )
        if bot in paper:
            m, md, sd, w, bw, to = paper[bot]
            lines.append(f"| {bot.capitalize()} | paper (n=100) | {m:.2f} | {md:.2f} | {sd:.2f} "
                         f"| {w:.1f}% | {bw:.1f}% | {to:.1f}% | | | |")
    return lines + [""]


def render_report(summary: dict, figures: Sequence[str] = ()) -> str:
    """report.md: Tables 6-9 in the paper's layout, ours beside the paper's, then figures and set-up."""
    cfg = summary["config"]
    d = summary["descriptive"]
    lines = [
        f"# jaxarena evaluation protocol — run `{summary['run_id']}`",
        "",
        (f"{cfg['episodes']} episodes per bot type and combination, seed {cfg['seed']}, paired seeds for A and B. "
         f"LLM: {summary['llm']['backend'] if summary.get('llm') else '—'}"
         f" ({summary['llm']['model'] if summary.get('llm') else '—'}). "
         "Time-to-defeat is the episode length in seconds (timeouts count as 120 s). "
         "The paper's numbers (Unity, n = 100) are printed under ours for reference; "
         "they come from a different simulator and policies, so agreement is not expected."),
        "",
    ]
    if "A" in d:
        lines += _desc_table("Table 6. Combination A — descriptive statistics", d["A"], PAPER_TABLE6)
    if "B" in d:
        lines += _desc_table("Table 7. Combination B — descriptive statistics", d["B"], PAPER_TABLE7)
    mw = summary["mann_whitney"]
    if mw:
        lines += ["### Table 8. Mann–Whitney U test, A vs B (two-sided, α = 0.05)", "",
                  "| Bot | Source | U | p | r = Z/√N | r_rb | Direction |", "|---|---|---:|---:|---:|---:|---|"]
        for bot in BOTS:
            if bot in mw:
                m = mw[bot]
                lines.append(f"| {bot.capitalize()} | ours (n1={m['n1']}, n2={m['n2']}) | {m['U']:.1f} "
                             f"| {_p(m['p'])}{m['stars']} | {m['r']:+.3f} | {m['r_rb']:+.3f} | {m['direction']} |")
            u, p, st, r, direction = PAPER_TABLE8[bot]
            lines.append(f"| {bot.capitalize()} | paper (n1=n2=100) | {u:.1f} | {p:.4f}{st} | | {r:+.3f} | {direction} |")
        lines += ["", ("U is A's statistic (`scipy.stats.mannwhitneyu(A, B)`); r and r_rb are negative when B's "
                       "episodes are shorter. Stars: *** p < 0.001, ** p < 0.01, * p < 0.05, ns otherwise. "
                       "The paper's r column equals the rank-biserial r_rb = 1 − 2U/(n1·n2) "
                       "(e.g. 1 − 2·6430.5/10000 = −0.286), so it is printed in that column."), ""]
    tags = summary["tags"]
    if tags["overall"]["total"] or "B" in d:
        t = tags["overall"]
        lines += [(f"### Table 9. LLM strategy tag selection frequency ({t['total']} decisions; paper: "
                   f"{PAPER_TABLE9['total']})"), "",
                  "| Tag | Name | Count | % | Paper count | Paper % | From a usable reply |",
                  "|---:|---|---:|---:|---:|---:|---:|"]
        for i, name in enumerate(TAG_NAMES):
            pct = t["pct"][i]
            lines.append(f"| {i} | {name} | {t['counts'][i]} | {pct:.1f} | {PAPER_TABLE9['counts'][i]} "
                         f"| {PAPER_TABLE9['pct'][i]:.1f} | {tags['replied']['counts'][i]} |")
        lines += ["", ("Count: the tag in force after each decision, as in the paper (a fallback keeps the "
                       "previous tag); the last column counts only decisions whose reply was a valid digit.")]
        lines += ["", "By bot type (counts, then %):", "", "| Bot | " + " | ".join(TAG_NAMES) + " | Total |",
                  "|---|" + "---:|" * 5]
        for bot in BOTS:
            if bot in tags["by_bot"]:
                tb = tags["by_bot"][bot]
                cells = " | ".join(f"{c} ({p:.1f}%)" for c, p in zip(tb["counts"], tb["pct"]))
                lines.append(f"| {bot.capitalize()} | {cells} | {tb['total']} |")
        fb = summary["fallbacks"]
        lines += ["", "Fallbacks (the previous tag kept), by cause:", "",
                  "| Bot | " + " | ".join(FALLBACK_REASONS) + " | total |", "|---|" + "---:|" * 5]
        for bot in BOTS:
            if bot in fb["by_bot"]:
                lines.append(f"| {bot.capitalize()} | " + " | ".join(str(fb["by_bot"][bot][r]) for r in FALLBACK_REASONS)
                             + f" | {fb['by_bot'][bot]['total']} |")
        lines.append("| All | " + " | ".join(str(fb["overall"][r]) for r in FALLBACK_REASONS)
                     + f" | {fb['overall']['total']} |")
        lines.append("")
        if t["total"] and fb["overall"]["total"] > 0.5 * t["total"]:
            # Say it where the reader looks: with most replies unusable, B is mostly "A with
            # the previous tag", and the A-vs-B comparison measures the policies, not the LLM.
            lines += [(f"**Note:** {fb['overall']['total']} of {t['total']} decisions "
                       f"({100 * fb['overall']['total'] / t['total']:.0f}%) were fallbacks that kept the previous "
                       "tag, so the LLM barely steered Combination B in this run."), ""]
    if figures:
        lines += ["## Figures", ""] + [f"![{Path(f).stem}]({Path(f).name})" for f in figures] + [""]
    tm = summary["timings"]
    lc = summary.get("llm_counters") or {}
    lines += [
        "## Run", "",
        (f"- Timings (s, summed over cells): compile {tm['cells_compile_s']:.1f}, simulation "
         f"{tm['cells_simulation_s']:.1f}, LLM {tm['cells_llm_s']:.1f}."),
        (f"- LLM: {lc.get('calls', 0)} batched calls, {lc.get('decisions', 0)} decisions, "
         f"{lc.get('distinct_prompts', 0)} distinct prompts, {lc.get('llm_requests', 0)} sent to the model, "
         f"{lc.get('cache_hits', 0)} cache hits, {lc.get('fallback_total', 0)} fallbacks."),
        "- Policies: " + ", ".join(f"{k}: `{v['source']}` ({v['sha256'][:19]}…, {v.get('env_id', 'Arena-v0')})" for k, v in summary["policies"].items()),
        "- Versions, seeds, checksums and every number above: `summary.json`.", "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- figures


def make_figures(run_dir: str | Path, summary: dict, cells: dict[str, dict]) -> list[str]:
    """Figs. 5-9 as PNG files in run_dir; returns their paths (those that apply to the run)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    by = defaultdict(dict)
    for c in cells.values():
        by[c["combination"]][c["bot"]] = np.asarray(c["episodes"]["duration_s"])
    paths = []

    def save(fig, name):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(str(write_atomic(run_dir / name, buf.getvalue())))

    bins = np.arange(0, 125.1, 5.0)
    for comb, num, fname in (("A", 5, "fig5_durations_A.png"), ("B", 6, "fig6_durations_B.png")):
        if comb not in by:
            continue
        bots = [b for b in BOTS if b in by[comb]]
        fig, axes = plt.subplots(1, len(bots), figsize=(4.2 * len(bots), 3.2), squeeze=False)
        for ax, bot in zip(axes[0], bots):
            x = by[comb][bot]
            ax.hist(x, bins=bins, color="C0" if comb == "A" else "C1", alpha=0.8)
            ax.axvline(x.mean(), color="k", ls="--", label=f"mean {x.mean():.1f}")
            ax.axvline(np.median(x), color="k", ls="-", label=f"median {np.median(x):.1f}")
            ax.set(title=bot.capitalize(), xlabel="time-to-defeat (s)", ylabel="episodes")
            ax.legend(fontsize=8)
        fig.suptitle(f"Figure {num}. Combination {comb} time-to-defeat by bot type", y=1.04)
        save(fig, fname)

    desc = summary["descriptive"]
    groups = [(c, b) for c in ("A", "B") for b in BOTS if b in desc.get(c, {})]
    if groups:
        fig, ax = plt.subplots(figsize=(7.5, 3.6))
        labels = [f"{c}\n{b}" for c, b in groups]
        bottom = np.zeros(len(groups))
        for key, label, color in (("npc_win_pct", "NPC win", "C2"), ("bot_win_pct", "bot win", "C3"),
                                  ("timeout_pct", "timeout", "C7")):
            vals = np.array([desc[c][b][key] for c, b in groups])
            ax.bar(labels, vals, bottom=bottom, label=label, color=color)
            bottom += vals
        ax.set(ylabel="% of episodes", title="Figure 7. Episode outcomes by combination and bot type")
        ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
        save(fig, "fig7_outcomes.png")

    mw = summary["mann_whitney"]
    if mw:
        bots = [b for b in BOTS if b in mw]
        fig, ax = plt.subplots(figsize=(7.5, 3.8))
        data, pos = [], []
        for i, bot in enumerate(bots):
            data += [by["A"][bot], by["B"][bot]]
            pos += [3 * i + 0.6, 3 * i + 1.4]
        parts = ax.boxplot(data, positions=pos, widths=0.7, patch_artist=True)
        for j, box in enumerate(parts["boxes"]):
            box.set_facecolor("C0" if j % 2 == 0 else "C1")
        for i, bot in enumerate(bots):
            m = mw[bot]
            ax.text(3 * i + 1, 126, f"p={_p(m['p'])}{'' if m['stars'] == 'ns' else m['stars']}", ha="center", fontsize=9)
        ax.set_xticks([3 * i + 1 for i in range(len(bots))], [b.capitalize() for b in bots])
        ax.set(ylabel="time-to-defeat (s)", ylim=(0, 135),
               title="Figure 8. A (blue) vs B (orange), Mann–Whitney U two-sided")
        save(fig, "fig8_a_vs_b.png")

    by_bot = summary["tags"]["by_bot"]
    if by_bot:
        bots = [b for b in BOTS if b in by_bot]
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        width = 0.8 / len(bots)
        for j, bot in enumerate(bots):
            pct = [0.0 if math.isnan(p) else p for p in by_bot[bot]["pct"]]
            ax.bar(np.arange(4) + (j - (len(bots) - 1) / 2) * width, pct, width, label=bot.capitalize())
        ax.set_xticks(range(4), [f"{i} {n}" for i, n in enumerate(TAG_NAMES)])
        ax.set(ylabel="% of decisions", title="Figure 9. LLM tag selection frequency by bot type")
        ax.legend()
        save(fig, "fig9_tags.png")
    return paths


# --------------------------------------------------------------------------- all outputs


def write_outputs(run_dir: str | Path, cells: dict[str, dict], config: ProtocolConfig, meta: dict,
                  figures: bool = True) -> dict:
    """Writes every output file of a run (atomically); returns the summary."""
    run_dir = Path(run_dir)
    summary = summarize(cells, config, meta)
    write_atomic(run_dir / "episodes.csv", episodes_csv(episode_rows(cells, config.seed)))
    write_atomic(run_dir / "decisions.jsonl", decisions_jsonl(cells))
    fig_paths = make_figures(run_dir, summary, cells) if figures else []
    summary["figures"] = [Path(p).name for p in fig_paths]
    write_atomic(run_dir / "summary.json", json.dumps(summary, indent=2))
    write_atomic(run_dir / "report.md", render_report(summary, fig_paths))
    return summary

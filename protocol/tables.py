"""The report's text: the paper's Tables 6-9 (its numbers) and ours beside them, as markdown.

`render_report(summary)` turns a run's summary (`summary.summarize`) into
`report.md`, with the combinations' sections where the summary has them
(each rendered by its section, `protocol.combinations.sections`); nothing
here computes a statistic. Tag names, fallback causes,
bot names and the episode length come from `jaxarena.names`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from jaxarena.names import BOT_TYPES, EPISODE_S, FALLBACK_REASONS, NUM_TAGS, TAG_NAMES
from jaxarena.scenarios import DEFAULT_SCENARIO

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


def format_p(p: float) -> str:
    """A p-value as the tables and figures print it."""
    return f"{p:.2e}" if p < 1e-4 else f"{p:.4f}"


def md_row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _desc_table(title: str, ours: dict, paper: dict) -> list[str]:
    """Table 6 or 7: ours (with bootstrap CIs) and the paper's row, per bot."""
    lines = [
        f"### {title}",
        "",
        (
            "| Bot Type | Source | Mean (s) | Median (s) | Std (s) | NPC Win % | Bot Win % | Timeout % "
            "| NPC Win 95% CI | Bot Win 95% CI | Timeout 95% CI |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for bot in BOT_TYPES:
        if bot in ours:
            r = ours[bot]
            ci = r["ci95"]
            lines.append(
                f"| {bot.capitalize()} | ours (n={r['n']}) "
                f"| {r['mean_s']:.2f} | {r['median_s']:.2f} | {r['std_s']:.2f} "
                f"| {r['npc_win_pct']:.1f}% | {r['bot_win_pct']:.1f}% | {r['timeout_pct']:.1f}% "
                + "".join(f"| {ci[k][0]:.1f}–{ci[k][1]:.1f} " for k in ("npc_win", "bot_win", "timeout"))
                + "|"
            )
        if bot in paper:
            m, md, sd, w, bw, to = paper[bot]
            lines.append(
                f"| {bot.capitalize()} | paper (n=100) | {m:.2f} | {md:.2f} | {sd:.2f} "
                f"| {w:.1f}% | {bw:.1f}% | {to:.1f}% | | | |"
            )
    return lines + [""]


def _mann_whitney_table(mw: dict) -> list[str]:
    """Table 8: ours and the paper's test per bot, then how to read it."""
    lines = [
        "### Table 8. Mann–Whitney U test, A vs B (two-sided, α = 0.05)",
        "",
        "| Bot | Source | U | p | r = Z/√N | r_rb | Direction |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for bot in BOT_TYPES:
        if bot in mw:
            m = mw[bot]
            lines.append(
                f"| {bot.capitalize()} | ours (n1={m['n1']}, n2={m['n2']}) | {m['U']:.1f} "
                f"| {format_p(m['p'])}{m['stars']} | {m['r']:+.3f} | {m['r_rb']:+.3f} "
                f"| {m['direction']} |"
            )
        u, p, st, r, direction = PAPER_TABLE8[bot]
        lines.append(f"| {bot.capitalize()} | paper (n1=n2=100) | {u:.1f} | {p:.4f}{st} | | {r:+.3f} | {direction} |")
    return lines + [
        "",
        (
            "U is A's statistic (`scipy.stats.mannwhitneyu(A, B)`); r and r_rb are negative when B's "
            "episodes are shorter. Stars: *** p < 0.001, ** p < 0.01, * p < 0.05, ns otherwise. "
            "The paper's r column equals the rank-biserial r_rb = 1 − 2U/(n1·n2) "
            "(e.g. 1 − 2·6430.5/10000 = −0.286), so it is printed in that column."
        ),
        "",
    ]


def _tag_tables(tags: dict, fb: dict) -> list[str]:
    """Table 9 (ours beside the paper's), tags by bot, and fallbacks by cause."""
    t = tags["overall"]
    lines = [
        (f"### Table 9. LLM strategy tag selection frequency ({t['total']} decisions; paper: {PAPER_TABLE9['total']})"),
        "",
        "| Tag | Name | Count | % | Paper count | Paper % | From a usable reply |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for i, name in enumerate(TAG_NAMES):
        pct = t["pct"][i]
        lines.append(
            f"| {i} | {name} | {t['counts'][i]} | {pct:.1f} | {PAPER_TABLE9['counts'][i]} "
            f"| {PAPER_TABLE9['pct'][i]:.1f} | {tags['replied']['counts'][i]} |"
        )
    lines += [
        "",
        (
            "Count: the tag in force after each decision, as in the paper (a fallback keeps the "
            "previous tag); the last column counts only decisions whose reply was a valid digit."
        ),
    ]
    lines += [
        "",
        "By bot type (counts, then %):",
        "",
        md_row("Bot", *TAG_NAMES, "Total"),
        "|---|" + "---:|" * (NUM_TAGS + 1),
    ]
    for bot in BOT_TYPES:
        if bot in tags["by_bot"]:
            tb = tags["by_bot"][bot]
            counts = [f"{c} ({p:.1f}%)" for c, p in zip(tb["counts"], tb["pct"], strict=True)]
            lines.append(md_row(bot.capitalize(), *counts, tb["total"]))
    probs = tags.get("probs", {})
    if probs.get("overall", {}).get("n"):
        lines += [
            "",
            "What the LLM preferred (choice decoding): the mean of its per-decision probabilities of each tag, "
            "the mean entropy of those distributions (2 bits = indifferent among the four) and how often each "
            "tag was its most probable one:",
            "",
            md_row("Bot", *(f"p({name})" for name in TAG_NAMES), "Entropy (bits)", "Most probable (counts)", "n"),
            "|---|" + "---:|" * (NUM_TAGS + 3),
        ]
        rows = [(bot.capitalize(), probs["by_bot"][bot]) for bot in BOT_TYPES if bot in probs.get("by_bot", {})]
        for name, p in [*rows, ("All", probs["overall"])]:
            if p["n"]:
                lines.append(
                    md_row(
                        name,
                        *(f"{x:.3f}" for x in p["mean"]),
                        f"{p['entropy_bits']:.2f}",
                        " / ".join(map(str, p["top1"])),
                        p["n"],
                    )
                )
    lines += [
        "",
        "Fallbacks (the previous tag kept), by cause:",
        "",
        md_row("Bot", *FALLBACK_REASONS, "total"),
        "|---|" + "---:|" * (len(FALLBACK_REASONS) + 1),
    ]
    for bot in BOT_TYPES:
        if bot in fb["by_bot"]:
            lines.append(
                md_row(bot.capitalize(), *(fb["by_bot"][bot][r] for r in FALLBACK_REASONS), fb["by_bot"][bot]["total"])
            )
    lines.append(md_row("All", *(fb["overall"][r] for r in FALLBACK_REASONS), fb["overall"]["total"]))
    lines.append("")
    return lines


#: Above this share of fallbacks, a run's B results say more about the LLM's set-up than about the LLM.
FALLBACK_WARNING_SHARE = 0.5


def fallback_warning(summary: dict) -> str | None:
    """The warning for a run whose B decisions were mostly fallbacks, else None.

    With most replies unusable (a dead server, a model that answers in words), B is mostly B's
    policy holding its previous tag, and the A-vs-B comparison no longer measures the LLM.
    """
    total, fb = summary["tags"]["overall"]["total"], summary["fallbacks"]["overall"]
    if not total or fb["total"] <= FALLBACK_WARNING_SHARE * total:
        return None
    causes = ", ".join(f"{r}: {fb[r]}" for r in FALLBACK_REASONS if fb.get(r))
    return (
        f"{fb['total']} of {total} LLM decisions ({100 * fb['total'] / total:.0f}%) were fallbacks ({causes}) "
        "that kept the previous tag; the B results do not measure the LLM. The decisions.jsonl records "
        "say why each reply was unusable."
    )


def win_with_ci(entry: dict | None) -> str:
    """ "12.0% (5.0–19.0)": a win % and its 95% CI, or a dash where the run has no such cell."""
    if not entry:
        return "—"
    lo, hi = entry["ci95"]
    return f"{entry['win_pct']:.1f}% ({lo:.1f}–{hi:.1f})"


def summary_episode_s(summary: dict) -> float:
    """The episode length a summary counts a timeout as (older summaries lack it: they all ran 120 s)."""
    return summary.get("protocol", {}).get("episode_s", EPISODE_S)


_WIN_WORDS = {
    "up": "won more often than A",
    "down": "won less often than A",
    "none": "won neither more nor less often than A, as far as its CI tells",
}
_LENGTH_WORDS = {
    "shorter": "ended sooner than A's",
    "longer": "lasted longer than A's",
    "none": "showed no difference from A's at p < 0.05",
}


def _win_clause(entry: dict, paired: bool) -> str:
    lo, hi = entry["ci95"]
    kind = "paired " if paired else ""
    said = f"{_WIN_WORDS[entry['direction']]} ({entry['points']:+.1f} points, {kind}95% CI {lo:+.1f} to {hi:+.1f})"
    # A squad that wins (or loses) every episode leaves B no room to do better (or worse): say so.
    if entry.get("a_pct") in (0.0, 100.0) and entry["direction"] == "none":
        room = "B had no room to win more" if entry["a_pct"] == 100.0 else "B could only have won more"
        said += f", with A at {entry['a_pct']:.0f}%, where {room}"
    return said


def _length_clause(entry: dict) -> str:
    return f"{_LENGTH_WORDS[entry['direction']]} (r = {entry['r_rb']:+.3f}, p = {format_p(entry['p'])})"


def _verdict(reproduced: bool) -> str:
    return "reproduced" if reproduced else "not reproduced"


def findings_paragraph(found: dict) -> list[str]:
    """The report's opening paragraph (`protocol.findings`): how many of the paper's findings reproduced,
    then each bot's two."""
    if not found:
        return []
    checks = [found[bot][kind]["reproduced"] for bot in found for kind in ("win", "length")]
    lines = [
        f"**What reproduced.** Of the paper's {len(checks)} findings about B against A on these bots, "
        f"{sum(checks)} reproduced here.",
        "",
    ]
    for bot, f in found.items():
        win, length = f["win"], f["length"]
        lines.append(
            f"- **{bot.capitalize()} bot.** Wins: in the paper B {_win_clause(win['paper'], paired=False)}; "
            f"here B {_win_clause(win['ours'], paired=True)}: {_verdict(win['reproduced'])}. "
            f"Episode length: in the paper B's episodes {_length_clause(length['paper'])}; "
            f"here they {_length_clause(length['ours'])}: {_verdict(length['reproduced'])}."
        )
    return lines + [""]


def llm_note(summary: dict) -> list[str]:
    """Where B's LLM is the embedded SmolLM2 with no adapter, a paragraph saying what it chose and which
    LLM the paper ran, so that its B is not read as the paper's."""
    cfg, tags = summary["config"], summary["tags"]["overall"]
    if cfg.get("llm") != "embedded" or cfg.get("adapter") or not tags["total"]:
        return []
    share = ", ".join(f"{name} {pct:.0f}%" for name, pct in zip(TAG_NAMES, tags["pct"], strict=True))
    return [
        f"B's LLM here is the embedded SmolLM2-135M without tuning; its tags in this run: {share} "
        f"(the paper's Mistral chose Surround in {PAPER_TABLE9['pct'][0]:.0f}% of its decisions). "
        "`--llm ollama --model mistral` plays the paper's own LLM.",
        "",
    ]


def render_report(summary: dict, figures: Sequence[str] = ()) -> str:
    """report.md: Tables 6-9 in the paper's layout, ours beside the paper's, then figures and set-up."""
    cfg = summary["config"]
    scenario = cfg.get("scenario", DEFAULT_SCENARIO)
    episode_s = summary_episode_s(summary)
    d = summary["descriptive"]
    llm = summary.get("llm")
    warning = fallback_warning(summary)
    lines = [
        f"# jaxarena evaluation protocol — run `{summary['run_id']}`",
        "",
        *([f"> **Warning:** {warning}", ""] if warning else []),
        *findings_paragraph(summary.get("findings") or {}),
        *llm_note(summary),
        (
            f"{cfg['episodes']} episodes per bot type and combination, seed {cfg['seed']}, paired seeds for A and B. "
            f"LLM: {llm['backend'] if llm else '—'} ({llm['model'] if llm else '—'}"
            f"{', ' + llm['decode'] + ' decoding' if llm and llm.get('decode') else ''}"
            f"{', ' + llm['path'] + ' path' if llm and llm.get('path') else ''}). "
            f"Time-to-defeat is the episode length in seconds (timeouts count as {episode_s:g} s). "
            "The paper's numbers (Unity, n = 100) are printed under ours for reference; "
            "they come from a different simulator and policies, so agreement is not expected."
            + (f" Scenario: `{scenario}` (not the paper's arena)." if scenario != DEFAULT_SCENARIO else "")
        ),
        "",
    ]
    if "A" in d:
        lines += _desc_table("Table 6. Combination A — descriptive statistics", d["A"], PAPER_TABLE6)
    if "B" in d:
        lines += _desc_table("Table 7. Combination B — descriptive statistics", d["B"], PAPER_TABLE7)
    if summary["mann_whitney"]:
        lines += _mann_whitney_table(summary["mann_whitney"])
    if summary["tags"]["overall"]["total"] or "B" in d:
        lines += _tag_tables(summary["tags"], summary["fallbacks"])
    from .combinations import sections  # imported here: the sections' renderers import this module

    for section in sections():
        if summary.get(section.key) and section.render is not None:
            lines += section.render(summary[section.key])
    if figures:
        lines += ["## Figures", ""] + [f"![{Path(f).stem}]({Path(f).name})" for f in figures] + [""]
    tm = summary["timings"]
    lc = summary.get("llm_counters") or {}
    in_graph = tm.get("llm_path") == "graph"
    policies = ", ".join(
        f"{k}: `{v['source']}` ({v['sha256'][:19]}…, {v.get('env_id', 'Arena-v0')})"
        for k, v in summary["policies"].items()
    )
    lines += [
        "## Run",
        "",
        (
            f"- Timings (s, summed over cells): compile {tm['cells_compile_s']:.1f}, simulation "
            f"{tm['cells_simulation_s']:.1f}, LLM {tm['cells_llm_s']:.1f}"
            + (" (the LLM ran inside the rollout: its time is in the simulation's)." if in_graph else ".")
        ),
        *([f"- LLM path: {tm['llm_path']} ({tm.get('llm_path_reason', '')})."] if tm.get("llm_path") else []),
        *(
            [
                f"- Pricing decisions with the oracle: {tm['cells_pricing_s']:.1f} s "
                f"(+ {tm['cells_pricing_compile_s']:.1f} s compile), not in the simulation time."
            ]
            if "cells_pricing_s" in tm
            else []
        ),
        (
            f"- LLM: {lc.get('calls', 0)} batched calls, {lc.get('decisions', 0)} decisions, "
            f"{lc.get('distinct_prompts', 0)} distinct prompts, {lc.get('llm_requests', 0)} sent to the model, "
            f"{lc.get('cache_hits', 0)} cache hits, {lc.get('fallback_total', 0)} fallbacks."
        ),
        f"- Policies: {policies}",
        "- Versions, seeds, checksums and every number above: `summary.json`.",
        "",
    ]
    return "\n".join(lines)

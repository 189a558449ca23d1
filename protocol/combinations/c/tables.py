"""report.md's Combination C section: C and its ablations against B, as markdown.

`selector_tables(section)` renders the `selector` section of a run's summary
(`summary`) and `print_selector` its console lines; nothing
here computes a statistic.
"""

from __future__ import annotations

import math

from jaxarena.names import BOT_TYPES, TAG_NAMES

from ...tables import format_p


def _row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _pct(x: float) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}%"


def _ci(lo: float, hi: float, fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(lo)}–{fmt.format(hi)}"


def _dist(freq: dict) -> str:
    """ "12 / 80 / 8 / 0": the % of decisions per tag, in tag order."""
    if not freq["total"]:
        return "—"
    return " / ".join(f"{p:.0f}" for p in freq["pct"])


def _bots(section: dict):
    for bot in BOT_TYPES:
        if bot in section["by_bot"]:
            yield bot, section["by_bot"][bot]


def _legend(section: dict) -> list[str]:
    lines = ["Labels (each its own cell per bot, on the same paired episodes as A and B):", ""]
    for label in section["labels"]:
        v = section["variants"].get(label, {})
        sel = v.get("selector", {})
        played = f"selector `{sel.get('spec')}` ({str(sel.get('sha256', ''))[:19]}…)" if sel.get("plays") else ""
        inputs = v.get("inputs", {})
        detail = ", ".join(
            x
            for x in (
                played,
                f"chooser {v['chooser']}" if v else "",
                f"{inputs['style']} candidates, N = {v.get('choosable', inputs['num_candidates'])}, "
                f"deduction {'on' if inputs['deduction'] else 'off'}"
                if inputs
                else "",
            )
            if x
        )
        lines.append(f"- **{label}**: {v.get('description', '')}" + (f" ({detail})." if detail else "."))
    trained = {
        v["selector"]["trained"]["scenario"] for v in section["variants"].values() if v.get("selector", {}).get("plays")
    }
    tables = {v["table"]["name"]: v["table"] for v in section["variants"].values() if v.get("table")}
    for name, t in tables.items():
        lines.append(
            f"- Strategy table `{name}`: {t['backend']} {t['model']} ({t['decode']} decoding), "
            f"prompts sha256 {t['prompts_sha256'][:12]}…, arrays sha256 {t['arrays_sha256'][:12]}…."
        )
    if section.get("squad_differs_from_B"):
        squads = sorted({section["variants"].get(lb, {}).get("squad", "?") for lb in section["squad_differs_from_B"]})
        lines.append(
            f"- **{', '.join(section['squad_differs_from_B'])} play another squad policy than B "
            f"({', '.join(f'`{x}`' for x in squads)})**: against B they differ in the squad and the tag source "
            "at once. The ablations on the same squad (C-N1, C-llm, C-random) isolate the selector; "
            "`--policy-b` with C's squad makes B the same squad."
        )
    if trained - {section["scenario"]}:
        lines.append(
            f"- The selectors were trained on scenario {', '.join(sorted(trained))}, not on this run's "
            f"`{section['scenario']}`."
        )
    return lines + [""]


def _outcome_table(section: dict) -> list[str]:
    lines = [
        f"### Combination C. The RL selector and its ablations vs B — scenario `{section['scenario']}`",
        "",
        *_legend(section),
        "| Bot | Label | NPC Win % (95% CI) | Bot Win % | Timeout % | Mean (s) | Median (s) "
        "| Win − B (pp, 95% CI) | Mann–Whitney vs B: U, p, r_rb |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for bot, rows in _bots(section):
        for label, r in rows.items():
            vs = r.get("vs_B")
            mw = vs["mann_whitney"] if vs else None
            lines.append(
                _row(
                    bot.capitalize(),
                    label,
                    f"{r['win_pct']:.1f}% ({_ci(*r['ci95'])})",
                    _pct(r["bot_win_pct"]),
                    _pct(r["timeout_pct"]),
                    f"{r['mean_s']:.2f}",
                    f"{r['median_s']:.2f}",
                    f"{vs['win_pct_points']:+.1f} ({vs['ci95'][0]:+.1f}, {vs['ci95'][1]:+.1f})" if vs else "—",
                    f"{mw['U']:.1f}, {format_p(mw['p'])}{mw['stars']}, {mw['r_rb']:+.3f} ({mw['direction']})"
                    if mw
                    else "—",
                )
            )
    return lines + [
        "",
        "Win %: the squad's (NPC) win rate with its 95% bootstrap CI. Win − B: paired bootstrap over episodes. "
        "Mann–Whitney: two-sided, of time-to-defeat, B's durations first (U is B's statistic; r_rb < 0: the "
        "label's episodes are shorter). A and O (where run) are shown for context.",
        "",
    ]


def _tags_table(section: dict) -> list[str]:
    names = " / ".join(TAG_NAMES)
    lines = [
        "Tags chosen (% of decisions: " + names + ") and the entropy of that distribution (bits; 2 = all four "
        "equally often), beside the LLM's first candidate (top-1) at the same decisions. TV: total-variation "
        "distance between the two distributions; ≠ top-1: decisions whose chosen tag is not the LLM's first.",
        "",
        "| Bot | Label | Chosen % | Entropy (bits) | LLM top-1 % | Top-1 entropy | TV | ≠ top-1 | Decisions |",
        "|---|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for bot, rows in _bots(section):
        for label, r in rows.items():
            if "tags" not in r:
                continue
            t, b = r["tags"], r.get("bias")
            lines.append(
                _row(
                    bot.capitalize(),
                    label,
                    _dist(t),
                    f"{t['entropy_bits']:.2f}" if t["total"] else "—",
                    _dist(b["llm_top1"]) if b else "—",
                    f"{b['llm_top1']['entropy_bits']:.2f}" if b and b["n"] else "—",
                    f"{b['tv_distance']:.2f}" if b and b["n"] else "—",
                    _pct(b["not_top1_pct"]) if b else "—",
                    t["total"],
                )
            )
    return lines + [""]


def _deduction_table(section: dict) -> list[str]:
    rows = [(bot, label, r["deduction"]) for bot, per in _bots(section) for label, r in per.items() if "deduction" in r]
    if not rows:
        return []
    classes = rows[0][2]["classes"]
    lines = [
        "The LLM's deduction (argmax) against the true opponent class at each decision, and collapsed to the "
        "style (the balanced bot's two modes count as one). Deduced: % of decisions per class ("
        + " / ".join(classes)
        + "). CIs: bootstrap over episodes.",
        "",
        "| Bot | Label | Class accuracy (95% CI) | Style accuracy (95% CI) | Deduced % | Decisions |",
        "|---|---|---:|---:|---|---:|",
    ]
    for bot, label, d in rows:
        if not d["n"]:
            continue
        deduced = " / ".join(f"{100 * x / d['n']:.0f}" for x in d["deduced"])
        lines.append(
            _row(
                bot.capitalize(),
                label,
                f"{d['class_pct']:.1f}% ({_ci(*d['class_ci95'])})",
                f"{d['style_pct']:.1f}% ({_ci(*d['style_ci95'])})",
                deduced,
                d["n"],
            )
        )
    return lines + [""]


def _regret_table(section: dict) -> list[str]:
    rows = [(bot, label, r["regret"]) for bot, per in _bots(section) for label, r in per.items() if "regret" in r]
    if not rows:
        return [
            "Regret against the oracle: not measured in this run (`--price-c` prices C's decisions; "
            "`--price-decisions` B's).",
            "",
        ]
    lines = [
        "Regret against the oracle (priced decisions; K playouts per tag, see the headroom section's notes):",
        "",
        "| Bot | Label | Mean regret (95% CI) | Agrees with O (95% CI) | Decisions |",
        "|---|---|---:|---:|---:|",
    ]
    for bot, label, m in rows:
        lines.append(
            _row(
                bot.capitalize(),
                label,
                f"{m['mean_regret']:.3f} ({_ci(*m['regret_ci95'], fmt='{:.3f}')})",
                f"{m['agreement_pct']:.1f}% ({_ci(*m['agreement_ci95'])})",
                m["decisions"],
            )
        )
    return lines + [""]


def selector_tables(section: dict) -> list[str]:
    """The report's Combination C section: outcomes vs B, tags and bias, deduction, regret."""
    return _outcome_table(section) + _tags_table(section) + _deduction_table(section) + _regret_table(section)


def print_selector(section: dict) -> None:
    """C and its ablations, one line each: squad win % (95% CI), against B (paired difference in pp
    and the Mann-Whitney p of time-to-defeat), and the entropy of the tags chosen."""
    print(f"  Combination C (scenario {section['scenario']}): squad win % (95% CI); vs B: pp (paired CI), MWU p")
    for bot, rows in section["by_bot"].items():
        for label, r in rows.items():
            line = f"    {bot:<10} {label:<13} {r['win_pct']:5.1f}% ({r['ci95'][0]:3.0f}-{r['ci95'][1]:3.0f})"
            if "vs_B" in r:
                v = r["vs_B"]
                mw = v["mann_whitney"]
                line += (
                    f"  vs B {v['win_pct_points']:+6.1f} pp ({v['ci95'][0]:+.1f}, {v['ci95'][1]:+.1f})"
                    f"  MWU p {mw['p']:.3g}{mw['stars']} ({mw['direction']})"
                )
            if "tags" in r and r["tags"]["total"]:
                line += f"  tag entropy {r['tags']['entropy_bits']:.2f} bits"
            print(line)

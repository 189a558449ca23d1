"""A run's optional sections on the console: a few lines each after `jaxarena-evaluate` finishes.

Each printer takes its section of the run's summary (`summary.json`); the
sections name them as their `console` (`protocol.combination.ReportSection`).
"""

from __future__ import annotations


def print_oracle(oracle: dict) -> None:
    """The headroom table in a few lines: squad win % (95% CI) of A, B, the best fixed tag and O."""

    def rate(entry):
        return f"{entry['win_pct']:5.1f}% ({entry['ci95'][0]:.0f}-{entry['ci95'][1]:.0f})" if entry else "    —"

    print(f"  oracle (scenario {oracle['scenario']}, K={oracle['rollouts']}): squad win % (95% CI)")
    for bot, r in oracle["by_bot"].items():
        best = r.get("best_fixed")
        parts = [f"A {rate(r.get('A'))}", f"B {rate(r.get('B'))}"]
        if best:
            parts.append(f"best F ({best['name']}) {rate(best)}")
        parts.append(f"O {rate(r.get('O'))}")
        if r.get("headroom"):
            h = r["headroom"]
            parts.append(f"headroom {h['pct_points']:+.1f} pp ({h['ci95'][0]:+.1f}, {h['ci95'][1]:+.1f})")
        if r.get("llm"):
            m = r["llm"]
            parts.append(
                f"LLM regret {m['mean_regret']:.3f} ({m['regret_ci95'][0]:.3f}-{m['regret_ci95'][1]:.3f}), "
                f"agrees {m['agreement_pct']:.0f}% of {m['decisions']}"
            )
        print(f"    {bot:<10} " + "  ".join(parts))


def print_whitebox(whitebox: dict) -> None:
    """Each white-box squad's win % (95% CI) and its paired difference from A."""
    print("  white-box squads: squad win % (95% CI), minus A's in pp (paired 95% CI)")
    for bot, r in whitebox["by_bot"].items():
        parts = [f"A {r['A']['win_pct']:5.1f}%"] if "A" in r else []
        for name, e in r["squads"].items():
            part = f"{name} {e['win_pct']:5.1f}% ({e['ci95'][0]:.0f}-{e['ci95'][1]:.0f})"
            if "vs_A" in e:
                v = e["vs_A"]
                part += f" {v['win_pct_points']:+.1f} ({v['ci95'][0]:+.1f}, {v['ci95'][1]:+.1f})"
            parts.append(part)
        print(f"    {bot:<10} " + "  ".join(parts))


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

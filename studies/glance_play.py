"""What a glance table is worth: tables of answers, from adapters or written out, played on paired episodes.

A glance LLM plays its table of most likely answers (one tag per glance
prompt), so a table is the whole of what it does in the game. This plays
any number of tables beside always Aggressive on the protocol's paired
episodes. At 100 episodes per bot a paired difference's standard error is
about 5 points, as large as the differences between learned tables; 1,000
episodes bring it under 2 and cost seconds here.

A table is written as 18 tag initials in the order of the glance prompts
(S Surround, A Aggressive, F Flank, R Retreat), e.g. AAAAAAAAAAAAAARFAF,
or named by a glance adapter (a shipped name or a directory), whose most
likely answers it reads, or by a glance table's directory (`jaxarena-tune-llm
glance --learner table`). `--versus` names one of the tables; every other one
then also gets its paired difference from it.

    python studies/glance_play.py --tables smollm2-raid-glance AAAAAAAARAAAAAAFAA --episodes 1000 --out runs/play
"""

from __future__ import annotations

import sys

from jaxarena.cli_errors import cli_main
from jaxarena.llm.glance import GLANCE_PERIOD_S, NUM_GLANCE_CELLS
from jaxarena.llm.tuning.glance_report import check_tables, initials, parse_table, play_tables, played_on
from jaxarena.llm.tuning.paired_play import (
    run_study,
    study_parser,
    versus_always_aggressive,
    win_cell,
    write_result,
)


def play(
    specs,
    *,
    scenario: str,
    policy_spec: str,
    bots,
    episodes: int,
    seed: int,
    n_boot: int = 10_000,
    versus: str | None = None,
) -> dict:
    """Play always Aggressive and every table in `specs` on `episodes` paired episodes per bot of `seed`.

    `versus` (one of `specs`): each other table's row also holds its paired difference from that one
    (`minus_versus`, pp and 95% CI).
    """
    if versus is not None and versus not in specs:
        raise ValueError(f"--versus names one of the tables played; {versus!r} is not among {list(specs)}")
    tables = {spec: parse_table(spec) for spec in specs}
    readers, wins = play_tables(scenario, policy_spec, bots, tables, episodes=episodes, seed=seed, n_boot=n_boot)
    for name in tables if versus is not None else ():
        for bot in bots:
            diff = versus_always_aggressive(wins[name][bot], wins[versus][bot], n_boot=n_boot, seed=seed)
            readers[name][bot]["minus_versus"] = diff["minus_always_aggressive"]
    return {
        "versus": versus,
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
    versus = result.get("versus")
    if versus is not None:
        lines += ["", f"Minus `{versus}`, paired, pp [95% CI]:", "", "| table | " + " | ".join(bots) + " |"]
        lines.append("|---|" + "---|" * len(bots))
        for name in result["tables"]:
            cells = (result["readers"][name][bot]["minus_versus"] for bot in bots)
            lines.append(f"| {name} | " + " | ".join(f"{d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]" for d in cells) + " |")
    return "\n".join(lines) + "\n"


def run_glance_play(*, out: str, tables, **kwargs) -> dict:
    """`play(tables, **kwargs)`, written to OUT/glance_play.json and .md."""
    result = play(tables, **kwargs)
    write_result(out, "glance_play", result, markdown)
    return result


def parser():
    p = study_parser("glance_play.py", __doc__, "glance_play", episodes=1000)
    p.add_argument(
        "--tables",
        nargs="+",
        required=True,
        help="tables: 18 tag initials (e.g. AAAAAAAAAAAAAARFAF), adapter names, or adapter or glance table directories",
    )
    p.add_argument(
        "--versus", default=None, help="one of --tables: also give every table's paired difference from this one"
    )
    return p


@cli_main("glance_play.py")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    check_tables(args.tables)
    return run_study(
        "glance_play.py", args, run_glance_play, markdown, "glance_play", tables=args.tables, versus=args.versus
    )


if __name__ == "__main__":
    sys.exit(main())

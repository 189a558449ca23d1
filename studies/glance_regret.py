"""A glance table's regret, measured in play: what the best change of one answer would still add.

The oracle prices a tag held from a 5 s decision point to the episode's end
(docs/oracle.md). That describes no answer of a chooser that decides every
0.2 s, so it cannot price the glance LLM's decisions. A glance chooser is its
table (cell -> tag), and its regret here is the win probability that the best
table one answer away would add, per bot:

1. Selection, on the protocol's keys of `seed`: the table, and every table
   that differs from it in one answer, in a cell the table's own games glanced
   in, are played on the same paired episodes. A change in a cell the games
   never reach plays the same episodes, so it adds exactly nothing and is not
   played.
2. Confirmation, on the keys of `confirm_seed`: the change that added the most
   is played again beside the table. Taken on the selection keys alone, the
   largest of some thirty noisy differences would overstate it.

The selection searches the protocol's own keys of `seed` on purpose (a protocol
run with that seed plays those very episodes); the regrets it reports are the
confirmed gains, measured on `confirm_seed`'s keys.

The confirmed gain, floored at zero, is the regret. It is zero where no single
change helps (and where no change gains on the selection keys, nothing is
confirmed), which is what a table trained on the game's reward should reach.
The stock LLM answers Aggressive to every glance prompt, so its regret is
always Aggressive's.

Per bot, the best change may be one that costs another bot (on `raid`,
flanking the balanced bot at range lets the evasive one run). That is the
regret of a chooser told which bot it faces, as the oracle's is. A chooser
that reads only its prompt cannot take such a change, so the *bot-blind*
regret takes the one change with the largest mean gain over the bots and
confirms it against all of them together.

This is the regret of the whole table against its neighbours (every decision
in the changed cell changes), not a per-decision price.

    python studies/glance_regret.py --tables smollm2-raid-glance --seed 5 --out runs/glance-regret
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from jaxarena.cli_errors import UserError, cli_main
from jaxarena.llm.glance import (
    AGGRESSIVE,
    GLANCE_PERIOD_S,
    NUM_GLANCE_CELLS,
    glance_prompt,
    glance_source,
    initial_carry,
)
from jaxarena.llm.tuning.glance_report import check_tables, initials, parse_table, played_on
from jaxarena.llm.tuning.paired_play import run_study, squad_runner, study_parser, write_result
from jaxarena.names import NPC_WIN, NUM_TAGS, TAG_NAMES

STOCK = "always Aggressive"


def visited_cells(result) -> dict[int, float]:
    """{cell: share of the decisions made in it}, over the glances the episodes really made."""
    cells = np.asarray(result.decision_aux)[np.asarray(result.decision_active)]
    counts = np.bincount(cells, minlength=NUM_GLANCE_CELLS)
    return {int(c): float(counts[c] / counts.sum()) for c in np.flatnonzero(counts)}


def neighbours(table: np.ndarray, cells) -> list[tuple[int, int, np.ndarray]]:
    """(cell, tag, table with that one answer changed) for every other answer in each of `cells`."""
    out = []
    for cell in cells:
        for tag in range(NUM_TAGS):
            if tag != table[cell]:
                changed = table.copy()
                changed[cell] = tag
                out.append((cell, tag, changed))
    return out


def _wins(result) -> np.ndarray:
    return np.asarray(result.outcome == NPC_WIN, np.float64)


def selection_gains(play, table: np.ndarray, bot: str, seed: int) -> tuple[dict, dict]:
    """(the table's row against `bot`, {(cell, tag): paired win-rate gain of that one change}) on `seed`'s keys.

    Only the cells the table's games glanced in are played; a change anywhere else gains exactly 0.
    """
    own = play(bot, seed, table)
    base, visits = _wins(own), visited_cells(own)
    gains = {
        (c, t): float(np.mean(_wins(play(bot, seed, changed)) - base)) for c, t, changed in neighbours(table, visits)
    }
    row = {"win_pct": _pct(base.mean()), "visited_cells": [[c, round(v, 6)] for c, v in visits.items()]}
    return row | {"changes_played": len(gains)}, gains


def _pct(x) -> float:
    return round(100 * float(x), 6)  # so JSON records 18.5, not 18.499999999999996


def confirmed_change(play, table, base, gains: dict, bots, *, confirm_seed: int, n_boot: int) -> dict:
    """The change with the largest gain in `gains`, played beside `table` against `bots` on `confirm_seed`'s keys.

    `base(bot)` gives the table's own wins on those keys. Returns {"best_change": its record or None,
    "regret_pct": the confirmed gain floored at 0}. Against several bots the gain is the mean over them, with
    pairs resampled within each bot. Of equal gains the first change in (cell, tag) order is taken.
    """
    from jaxarena.protocol.stats import stratified_paired_bootstrap_diff

    (cell, tag), gain = max(sorted(gains.items()), key=lambda item: item[1], default=((None, None), 0.0))
    if gain <= 0:  # no glance was made, or no change wins more on the selection keys: nothing to confirm
        return {"best_change": None, "regret_pct": 0.0}
    changed = table.copy()
    changed[cell] = tag
    new = [_wins(play(bot, confirm_seed, changed)) for bot in bots]
    old = [base(bot) for bot in bots]
    confirmed = [_pct(x) for x in stratified_paired_bootstrap_diff(new, old, n_boot=n_boot, seed=confirm_seed)]
    change = {
        "cell": int(cell),
        "prompt": glance_prompt(cell),
        "from": TAG_NAMES[int(table[cell])],
        "to": TAG_NAMES[tag],
        "selection_gain_pct": _pct(gain),
        "confirmed_gain_pct": confirmed,
    }
    return {"best_change": change, "regret_pct": max(0.0, confirmed[0])}


def table_regret(play, table: np.ndarray, bots, *, seed: int, confirm_seed: int, n_boot: int, progress) -> dict:
    """One table's regret against each bot, and against the bots together (one change for all of them: what a
    chooser that cannot tell the bots apart could still gain); `play(bot, seed, table) -> RolloutResult`."""
    confirming = {}

    def base(bot):  # the table's own wins on the confirming keys: played once per bot, per-bot and bot-blind alike
        if bot not in confirming:
            confirming[bot] = _wins(play(bot, confirm_seed, table))
        return confirming[bot]

    confirm = {"confirm_seed": confirm_seed, "n_boot": n_boot}
    rows, gains = {}, {}
    for bot in bots:
        rows[bot], gains[bot] = selection_gains(play, table, bot, seed)
        rows[bot] |= confirmed_change(play, table, base, gains[bot], [bot], **confirm)
        progress(f"  vs {bot}: {rows[bot]['changes_played']} changes played, regret {rows[bot]['regret_pct']:.1f} pp")
    changes = set().union(*gains.values())
    mean_gains = {change: float(np.mean([gains[bot].get(change, 0.0) for bot in bots])) for change in changes}
    blind = confirmed_change(play, table, base, mean_gains, bots, **confirm)
    return {
        "table": initials(table),
        "bots": rows,
        "mean_regret_pct": round(float(np.mean([rows[bot]["regret_pct"] for bot in bots])), 6),
        "bot_blind": blind,
    }


def measure(
    specs: Sequence[str],
    *,
    scenario: str,
    policy_spec: str,
    bots: Sequence[str],
    episodes: int,
    seed: int,
    confirm_seed: int,
    n_boot: int = 10_000,
    progress=print,
) -> dict:
    """The regret of always Aggressive (the stock LLM's table) and of every table in `specs`: per bot, their mean,
    and that of one change for every bot; each beside the stock table's."""
    if seed == confirm_seed:
        raise ValueError(f"the confirming episodes must be other keys than the selection's; both are seed {seed}")
    tables = {STOCK: np.full(NUM_GLANCE_CELLS, AGGRESSIVE, np.int32)} | {s: parse_table(s) for s in specs}
    run = squad_runner(scenario, policy_spec, episodes, bots, glance_source(), decision_period_s=GLANCE_PERIOD_S)

    def play(bot, key_seed, table):
        return run(bot, key_seed, initial_carry(table, episodes))

    readers = {}
    for name, table in tables.items():
        progress(f"{name} ({initials(table)}):")
        readers[name] = table_regret(
            play, table, bots, seed=seed, confirm_seed=confirm_seed, n_boot=n_boot, progress=progress
        )
    stock = readers[STOCK]
    for row in readers.values():
        row["mean_regret_over_stock"] = _ratio(row["mean_regret_pct"], stock["mean_regret_pct"])
        row["regret_over_stock_by_bot"] = {
            bot: _ratio(r["regret_pct"], stock["bots"][bot]["regret_pct"]) for bot, r in row["bots"].items()
        }
        row["bot_blind_over_stock"] = _ratio(row["bot_blind"]["regret_pct"], stock["bot_blind"]["regret_pct"])
    return {
        "scenario": scenario,
        "policy": policy_spec,
        "episodes": episodes,
        "seed": seed,
        "confirm_seed": confirm_seed,
        "decision_period_s": GLANCE_PERIOD_S,
        "bots": list(bots),
        "readers": readers,
    }


def _ratio(regret: float, stock: float) -> float | None:
    return regret / stock if stock > 0 else None


def _fmt_ratio(ratio: float | None) -> str:
    return "–" if ratio is None else f"{ratio:.2f}x"


def _change_cell(row: dict) -> str:
    change = row["best_change"]
    if change is None:
        return "**0.0**: " + ("no glance made" if row.get("changes_played") == 0 else "no change gains")
    d = change["confirmed_gain_pct"]
    return (
        f"**{row['regret_pct']:.1f}**: cell {change['cell']} {change['from'][0]} → {change['to'][0]}, "
        f"{change['selection_gain_pct']:+.1f} then {d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]"
    )


def markdown(result: dict) -> str:
    bots = result["bots"]
    lines = [
        played_on(result, held_out="")
        + " Every one-answer change of a table, in the cells its games glanced in, is played on them (a search on "
        "the protocol's own keys of that seed); the best one per bot, and the best one over the bots, again on the "
        f"keys of seed {result['confirm_seed']}, where every regret below is measured.",
        "",
        "| table | " + " | ".join(bots) + " | mean over the bots (over the stock LLM's) | one change for every bot |",
        "|---|" + "---|" * (len(bots) + 2),
    ]
    for name, row in result["readers"].items():
        cells = " | ".join(_change_cell(row["bots"][bot]) for bot in bots)
        label = name if name == row["table"] else f"{name} ({row['table']})"
        blind = _change_cell(row["bot_blind"]) + f" ({_fmt_ratio(row['bot_blind_over_stock'])})"
        mean = f"**{row['mean_regret_pct']:.1f}** ({_fmt_ratio(row['mean_regret_over_stock'])})"
        lines.append(f"| {label} | {cells} | {mean} | {blind} |")
    lines += [
        "",
        "Each bot's cell: the regret (pp of win probability, the confirmed gain floored at 0); the best change "
        "(cell, old → new answer); its gain on the selection episodes, then on the confirming ones [95% CI]. "
        "The last column: the one change with the largest mean gain over the bots, confirmed on all of them "
        "together; what a chooser that cannot tell the bots apart could still gain.",
        "",
        "| cell | glance prompt |",
        "|---|---|",
    ]
    rows = [r for row in result["readers"].values() for r in (*row["bots"].values(), row["bot_blind"])]
    cells = sorted({r["best_change"]["cell"] for r in rows if r["best_change"]})
    lines += [f"| {c} | {glance_prompt(c)} |" for c in cells]
    return "\n".join(lines) + "\n"


def run_glance_regret(*, out: str, tables, **kwargs) -> dict:
    """`measure(tables, **kwargs)`, written to OUT/glance_regret.json and .md."""
    result = measure(tables, **kwargs)
    write_result(out, "glance_regret", result, markdown)
    return result


def parser():
    p = study_parser("glance_regret.py", __doc__, "glance_regret", episodes=1000)
    p.add_argument(
        "--tables", nargs="*", default=[], help="tables: 18 tag initials (e.g. AAAAAAAAAAAAAARFAF) or adapter names"
    )
    p.add_argument(
        "--confirm-seed", type=int, help="the protocol's seed of the confirming episodes (default: --seed + 1)"
    )
    return p


@cli_main("glance_regret.py")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    confirm = args.seed + 1 if args.confirm_seed is None else args.confirm_seed
    if confirm == args.seed:
        raise UserError(
            f"--confirm-seed must differ from --seed (both {confirm}): the best change is confirmed on other keys"
        )
    check_tables(args.tables)
    return run_study(
        "glance_regret.py", args, run_glance_regret, markdown, "glance_regret", tables=args.tables, confirm_seed=confirm
    )


if __name__ == "__main__":
    sys.exit(main())

"""`jaxarena-zoo`: the shipped squads, selectors and adapters, with their status and reference win rates.

jaxarena-zoo                              # every entry, markdown
jaxarena-zoo A-raid                       # one entry's whole card: command, win rates with intervals, note
jaxarena-zoo --status recommended --ci    # with each win rate's 95% interval
jaxarena-zoo --kind squad --json          # the cards as JSON
"""

from __future__ import annotations

import dataclasses
import json
import sys

from .cli_errors import ArgumentParser, cli_main
from .zoo_cards import KINDS, STATUSES, cards, table


def _as_json(card) -> dict:
    out = dataclasses.asdict(card)
    out["directory"] = str(card.directory)
    return out


def _named(name: str):
    """The card called `name`; a ValueError listing the names where there is none."""
    found = {c.name: c for c in cards()}
    if name not in found:
        raise ValueError(f"no zoo entry {name!r}; entries: {', '.join(sorted(found))}")
    return found[name]


def _describe(card) -> str:
    """One card as text: what it is, where it plays, how it was made, what it scored."""
    lines = [f"{card.name} ({card.kind}, {card.status}): {card.summary}"]
    arena = f"{card.env_id or '-'} / {card.scenario}" + (f", plays {card.plays}" if card.plays else "")
    lines += [f"arena:       {arena}", f"recipe:      {card.recipe}", f"command:     {card.command}"]
    for rate in card.win_rates:
        tag = f", tag {rate.tag}" if rate.tag else ""
        lines.append(
            f"vs {rate.bot + ':':<11} {rate.win_pct:.1f}% [{rate.ci95[0]:.1f}, {rate.ci95[1]:.1f}] (n {rate.n}{tag})"
        )
    if not card.win_rates:
        lines.append("win rates:   not measured")
    lines += [f"measured by: {card.measured_by}", f"note:        {card.note}", f"directory:   {card.directory}"]
    return "\n".join(lines)


@cli_main("jaxarena-zoo")  # a broken card, or a missing extra: one line, no traceback (--debug shows it)
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="jaxarena-zoo", description=__doc__.split("\n\n")[0])
    p.add_argument("name", nargs="?", help="show this entry's whole card (a name from the table)")
    p.add_argument("--kind", choices=KINDS, help="only this kind of entry")
    p.add_argument("--status", choices=STATUSES, help="only entries with this status")
    p.add_argument("--ci", action="store_true", help="print each win rate's 95%% interval")
    p.add_argument("--json", action="store_true", help="the cards as JSON instead of a table")
    args = p.parse_args(argv)
    if args.name is not None:
        card = _named(args.name)
        print(json.dumps(_as_json(card), indent=2, ensure_ascii=False) if args.json else _describe(card))
        return 0
    if args.json:
        print(json.dumps([_as_json(c) for c in cards(args.kind, args.status)], indent=2, ensure_ascii=False))
    else:
        print(table(args.kind, args.status, ci=args.ci))
    return 0


if __name__ == "__main__":
    sys.exit(main())

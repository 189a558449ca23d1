"""`jaxarena-zoo`: the shipped squads, selectors and adapters, with their status and reference win rates.

jaxarena-zoo                              # every entry, markdown
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


@cli_main("jaxarena-zoo")  # a broken card, or a missing extra: one line, no traceback (--debug shows it)
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="jaxarena-zoo", description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", choices=KINDS, help="only this kind of entry")
    p.add_argument("--status", choices=STATUSES, help="only entries with this status")
    p.add_argument("--ci", action="store_true", help="print each win rate's 95%% interval")
    p.add_argument("--json", action="store_true", help="the cards as JSON instead of a table")
    args = p.parse_args(argv)
    if args.json:
        print(json.dumps([_as_json(c) for c in cards(args.kind, args.status)], indent=2, ensure_ascii=False))
    else:
        print(table(args.kind, args.status, ci=args.ci))
    return 0


if __name__ == "__main__":
    sys.exit(main())

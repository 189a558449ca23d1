"""Combination C's options (`COptions`: its selectors, ablations and pricing) and the labels they give."""

from __future__ import annotations

import dataclasses

#: C's ablations, each played as its own cell labelled "C-<name>":
#: nodeduction: the selector trained without the LLM's deduction, which it then does not get;
#: N1: no diversity, the LLM's first candidate only (no selector);
#: llm: the LLM picks among its own candidates (the most probable one);
#: random: a uniformly random candidate;
#: scripted: the selector trained against the three scripted bots only (no population).
C_ABLATIONS: tuple[str, ...] = ("nodeduction", "N1", "llm", "random", "scripted")


@dataclasses.dataclass(frozen=True)
class COptions:
    """selector: C's trained selector, a shipped name ("C") or a run directory of
      `jaxarena-train-selector`; it names its squad policy and strategy table.
    selector_nodeduction / selector_scripted: the selectors of the "C-nodeduction" and
      "C-scripted" ablations (trained with `--deduction false` and `--population scripted`).
    ablations: the ablations played beside C (`C_ABLATIONS`; () for none).
    price: price every C decision with the oracle (`oracle_rollouts` playouts per tag).
    """

    selector: str = "C"
    selector_nodeduction: str = "C-nodeduction"
    selector_scripted: str = "C-scripted"
    ablations: tuple[str, ...] = C_ABLATIONS
    price: bool = False

    def __post_init__(self):
        object.__setattr__(self, "ablations", tuple(self.ablations))  # a list read back from JSON
        for a in self.ablations:
            if a not in C_ABLATIONS:
                raise ValueError(f"unknown C ablation {a!r}; choose from {', '.join(C_ABLATIONS)}")
        if len(set(self.ablations)) != len(self.ablations):
            raise ValueError(f"C ablations repeat: {self.ablations}")

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument(
            "--selector",
            default=cls.selector,
            metavar="NAME_OR_DIR",
            help="C's trained selector: a shipped name (default C) or a jaxarena-train-selector run directory; "
            "it names its squad policy and strategy table",
        )
        group.add_argument(
            "--c-ablations",
            default="all",
            metavar="LIST",
            help="C's ablations, each played beside C: all (default), none, or a comma list of "
            + ",".join(C_ABLATIONS),
        )
        group.add_argument(
            "--selector-nodeduction",
            default=cls.selector_nodeduction,
            metavar="NAME_OR_DIR",
            help="the selector of the C-nodeduction ablation (trained with --deduction false)",
        )
        group.add_argument(
            "--selector-scripted",
            default=cls.selector_scripted,
            metavar="NAME_OR_DIR",
            help="the selector of the C-scripted ablation (trained with --population scripted)",
        )
        group.add_argument(
            "--price-c",
            action="store_true",
            help="price every C decision with the oracle (K playouts per tag): C's regret per bot (slow, as "
            "--price-decisions)",
        )

    @classmethod
    def from_args(cls, args) -> COptions:
        asked = [x.strip() for x in args.c_ablations.split(",") if x.strip()]
        if [x.lower() for x in asked] == ["all"]:
            ablations = C_ABLATIONS
        elif [x.lower() for x in asked] in ([], ["none"]):
            ablations = ()
        else:  # any case: "n1" is N1
            ablations = tuple(next((a for a in C_ABLATIONS if a.lower() == x.lower()), x) for x in asked)
        return cls(
            selector=args.selector,
            selector_nodeduction=args.selector_nodeduction,
            selector_scripted=args.selector_scripted,
            ablations=ablations,
            price=args.price_c,
        )


def played_labels(config) -> list[str]:
    """ "C" and its ablations' labels ("C-N1", ...), or [] where the run does not play C."""
    return labels(config) if "C" in config.combinations else []


def labels(config) -> list[str]:
    """ "C" and the labels of the ablations the run's options name, in order."""
    return ["C", *(f"C-{a}" for a in config.options_of("C").ablations)]

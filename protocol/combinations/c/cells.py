"""Combination C and its ablations in the protocol: their selectors, tag sources, programs and records.

Every cell of the C family is played like B's (this package's `__init__`):
the selector's squad policy (its `SelectorConfig.squad`, the tag-following B)
on the run's scenario and paired keys, one vmapped batch under one jitted
`jaxarena.runner.make_runner` program, compiled once per label and reused for
the three bots. Only the tag source differs: `jaxarena.selector.source.selector_tag_source`, which reads
the LLM's deduction and candidates from the strategy table inside the
rollout and picks one candidate. The variants (`VARIANTS`):

| label | selector (network) | chooser | inputs |
|---|---|---|---|
| C | `--selector` | its network | the selector's |
| C-nodeduction | `--selector-nodeduction` (trained without deduction) | its network | the selector's (no deduction) |
| C-N1 | none | top1 | C's, with one candidate |
| C-llm | none | the LLM's most probable candidate | C's |
| C-random | none | uniform | C's |
| C-scripted | `--selector-scripted` (trained on the scripted bots only) | its network | the selector's |

The variants without a network take C's squad, table and inputs, so they
differ from C in the chooser alone. A cell's fingerprint names what its
episodes depend on: the squad's checksum (as for every cell), the chooser,
the inputs, the table (a hash of its arrays, the prompts' hash, the model)
and, where a network plays, the selector's checksum.

`records` turns a rollout's `decision_aux` into one decision record per
decision made (what the LLM deduced and proposed, which candidate was
chosen, the true opponent class), the C rows of `decisions.jsonl`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from jaxarena.names import LLM_FEATURES

#: Files of a selector run directory that determine how it plays (the rest are logs and plots).
SELECTOR_FILES = ("config.json", "selector.msgpack")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One cell label of the C family.

    selector_field: the `COptions` field naming the selector whose squad,
      table and inputs the cell uses; its network plays when the chooser is
      "selector" (its flag is the field's name, dashed).
    num_candidates: overrides the selector's (1 for the no-diversity ablation).
    requires: (field of `SelectorConfig`, value, what to train instead) that
      the named selector must satisfy, so an ablation cannot silently play the
      wrong selector.
    """

    label: str
    chooser: str
    selector_field: str
    description: str
    num_candidates: int | None = None
    requires: tuple[str, Any, str] | None = None


VARIANTS: dict[str, Variant] = {
    v.label: v
    for v in (
        Variant("C", "selector", "selector", "the RL selector picks among the LLM's candidates"),
        Variant(
            "C-nodeduction",
            "selector",
            "selector_nodeduction",
            "no deduction: a selector trained without the LLM's deduction, which neither it nor the candidate "
            "prompt gets",
            requires=("deduction", False, "--deduction false"),
        ),
        Variant(
            "C-N1",
            "top1",
            "selector",
            "no diversity (N = 1): the LLM's first candidate, no selector",
            num_candidates=1,
        ),
        Variant("C-llm", "llm", "selector", "the LLM picks among its own candidates (the most probable one)"),
        Variant("C-random", "random", "selector", "a uniformly random candidate"),
        Variant(
            "C-scripted",
            "selector",
            "selector_scripted",
            "a selector trained against the three scripted bots only (no population)",
            requires=("population", "scripted", "--population scripted"),
        ),
    )
}


def variant(label: str) -> Variant:
    if label not in VARIANTS:
        raise ValueError(f"unknown Combination C label {label!r}; choose from {', '.join(VARIANTS)}")
    return VARIANTS[label]


def selector_directory(spec: str) -> Path:
    """The run directory of a selector spec (`jaxarena.selector.train.selector_directory`)."""
    from jaxarena.selector import train

    return train.selector_directory(spec)


def selector_checksum(directory: Path) -> str:
    """sha256 of what decides how a selector plays, in order: its config, then its weights (the shipped
    `selector.msgpack`, or a training run's latest saved parameters, leaf by leaf)."""
    h = hashlib.sha256()
    for name in SELECTOR_FILES:
        h.update(name.encode() + b"\0")
        if (directory / name).exists():
            h.update((directory / name).read_bytes())
        else:  # a training run's folder: the weights live in its checkpoints
            import jax

            from jaxarena.selector.train import load_selector

            for leaf in jax.tree.leaves(load_selector(directory)[2]):
                h.update(np.asarray(leaf).tobytes())
        h.update(b"\0")
    return "sha256:" + h.hexdigest()


def table_identity(name: str, table) -> dict:
    """What a strategy table answers: a hash of its arrays, the prompts' hash and the model behind it."""
    from jaxarena.llm.strategy_table import ARRAY_FIELDS

    h = hashlib.sha256()
    for field in ARRAY_FIELDS:
        a = np.ascontiguousarray(np.asarray(getattr(table, field)))
        h.update(f"{field}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    meta = table.metadata
    return {
        "name": str(name),
        "arrays_sha256": h.hexdigest(),
        "prompts_sha256": meta.prompts_sha256,
        "backend": meta.backend,
        "model": meta.model,
        "decode": meta.decode,
    }


@dataclasses.dataclass(frozen=True)
class LoadedSelector:
    spec: str
    directory: Path
    checksum: str
    config: Any  # jaxarena.selector.train.SelectorConfig
    network: Any
    params: Any


class SelectorCells:
    """Combination C's cells for one protocol run (selectors and tables loaded once per session).

    Args:
      options: the run's `COptions` (its selectors, ablations and pricing).
      oracle_rollouts: the oracle's playouts per tag, where C's decisions are priced.
      session: the runner's session timings (selector and table loading add to `policy_load_s`).
    """

    def __init__(self, options, oracle_rollouts: int, session: dict[str, float]):
        self.options = options
        self.oracle_rollouts = oracle_rollouts
        self.session = session
        self._selectors: dict[str, LoadedSelector] = {}
        self._tables: dict[str, tuple[Any, dict]] = {}

    # -- what a label plays --
    def selector(self, label: str) -> LoadedSelector:
        """The selector a label takes its squad, table and inputs from (checked against the ablation)."""
        v = variant(label)
        spec = getattr(self.options, v.selector_field)
        if spec not in self._selectors:
            from jaxarena.selector.train import load_selector

            t = time.perf_counter()
            sel_config, network, params = load_selector(spec)
            directory = selector_directory(spec)
            self._selectors[spec] = LoadedSelector(
                spec, directory, selector_checksum(directory), sel_config, network, params
            )
            self.session["policy_load_s"] = self.session.get("policy_load_s", 0.0) + time.perf_counter() - t
        loaded = self._selectors[spec]
        if v.requires is not None:
            field, value, flag = v.requires
            if getattr(loaded.config, field) != value:
                raise ValueError(
                    f"{label} needs a selector trained with {field}={value!r} (jaxarena-train-selector {flag}); "
                    f"{spec!r} has {field}={getattr(loaded.config, field)!r}. Pass another with "
                    f"--{v.selector_field.replace('_', '-')}, or leave {label} out with --c-ablations"
                )
        return loaded

    def squad_spec(self, label: str) -> str:
        """The squad policy's spec ("B" or a run directory) that plays the label's tags."""
        return self.selector(label).config.squad

    def table(self, label: str):
        """(StrategyTable, its identity) of the label's selector."""
        name = self.selector(label).config.table
        if name not in self._tables:
            from jaxarena.llm.strategy_table import load_table

            t = time.perf_counter()
            table = load_table(name)
            self._tables[name] = (table, table_identity(name, table))
            self.session["policy_load_s"] = self.session.get("policy_load_s", 0.0) + time.perf_counter() - t
        return self._tables[name]

    def inputs(self, label: str):
        """The `InputConfig` the label's tag source reads the table with."""
        v = variant(label)
        inputs = self.selector(label).config.inputs
        if v.num_candidates is not None:
            inputs = dataclasses.replace(inputs, num_candidates=v.num_candidates)
        return inputs

    def priced(self, label: str) -> bool:
        return label == "C" and self.options.price

    # -- identity --
    def fingerprint(self, label: str) -> dict:
        """What a C-family cell's episodes depend on beyond the squad's checksum and the run's settings."""
        v = variant(label)
        fp: dict = {
            "chooser": v.chooser,
            "inputs": dataclasses.asdict(self.inputs(label)),
            "table": self.table(label)[1],
        }
        if v.chooser == "selector":
            fp["selector"] = self.selector(label).checksum
        if self.priced(label):
            fp["pricing"] = {"rollouts": self.oracle_rollouts}
        return fp

    def identity(self, label: str) -> dict:
        """For summary.json: the label's description, chooser, inputs and table, and the selector it came from."""
        v = variant(label)
        loaded = self.selector(label)
        inputs = self.inputs(label)
        out = {
            "description": v.description,
            "chooser": v.chooser,
            "inputs": dataclasses.asdict(inputs),
            # How many candidates the chooser may pick from (num_candidates None means all the LLM proposed).
            "choosable": int(inputs.choosable),
            "table": self.table(label)[1],
            "squad": loaded.config.squad,
            "selector": {
                "spec": loaded.spec,
                "source": str(loaded.directory),
                "sha256": loaded.checksum,
                "plays": v.chooser == "selector",  # False: only its squad, table and inputs are used
                "trained": {
                    k: getattr(loaded.config, k)
                    for k in ("scenario", "population", "deduction", "style", "learned_slots", "total_decisions")
                },
            },
        }
        return out

    # -- playing --
    def tag_source(self, label: str):
        from jaxarena.selector.source import selector_tag_source

        v = variant(label)
        loaded = self.selector(label)
        network, params = (loaded.network, loaded.params) if v.chooser == "selector" else (None, None)
        return selector_tag_source(self.table(label)[0], self.inputs(label), v.chooser, network, params)


def records(label: str, bot: str, result, period_s: float) -> list[dict]:
    """One record per decision made (period-major, as B's): the state, the tag in force before and
    after, what the LLM deduced and proposed, the candidate chosen and the true opponent class."""
    aux = {k: np.asarray(v) for k, v in result.decision_aux.items()}
    tags = np.asarray(result.decision_tags)
    feats = np.asarray(result.decision_features)
    active = np.asarray(result.decision_active)
    out = []
    for p, n in zip(*np.nonzero(active), strict=True):
        deduction = aux["deduction"][p, n]
        candidates = aux["candidates"][p, n]
        out.append(
            {
                "combination": label,
                "bot": bot,
                "episode": int(n),
                "period": int(p),
                "time_s": round(float(p) * period_s, 4),
                "state": {k: round(float(x), 4) for k, x in zip(LLM_FEATURES, feats[p, n], strict=True)},
                "prev_tag": int(tags[p - 1, n]) if p > 0 else 0,  # the runner starts every episode on tag 0
                "tag": int(tags[p, n]),
                "deduction": [round(float(x), 5) for x in deduction],
                "deduced": int(np.argmax(deduction)),
                "truth": int(aux["truth"][p, n]),
                "candidates": [int(x) for x in candidates],
                "candidate_probs": [round(float(x), 5) for x in aux["candidate_probs"][p, n]],
                "choice": int(aux["choice"][p, n]),
                "top1": int(candidates[0]),
            }
        )
    return out

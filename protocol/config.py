"""What a protocol run is: `ProtocolConfig`, its cells, their names and their keys.

A *cell* is one label of a combination against one bot type. The
combinations are values, one module each under `protocol.combinations`
(whose registry this module checks names against; each module's docstring
says what it plays); a combination may play several labels per bot, C its
ablations ("C-N1", ...; `C_ABLATIONS`, `protocol.selector_cells`).

Bots are named as in `jaxarena.names.BOT_TYPES`; a cell's key is
`fold_in(PRNGKey(seed), bot_index(bot))`, the same for every combination (the
paired design) and the same whichever other bots are run.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxarena.llm.backends import parse_llm_spec
from jaxarena.llm.choice import DECODE_MODES
from jaxarena.llm.paths import LLM_PATHS
from jaxarena.names import BOT_TYPES, DECISION_PERIOD_S, EPISODE_S, bot_index
from jaxarena.scenarios import DEFAULT_SCENARIO, scenario_overrides

#: What a run plays unless told otherwise: the paper's two (F and O cost minutes more, W seconds).
DEFAULT_COMBINATIONS: tuple[str, ...] = ("A", "B")
#: Playouts per tag of the oracle (Combination O and decision pricing) unless told otherwise.
DEFAULT_ORACLE_ROLLOUTS = 8
#: Combination C's ablations, each played as its own cell labelled "C-<name>":
#: nodeduction: the selector trained without the LLM's deduction, which it then does not get;
#: N1: no diversity, the LLM's first candidate only (no selector);
#: llm: the LLM picks among its own candidates (the most probable one);
#: random: a uniformly random candidate;
#: scripted: the selector trained against the three scripted bots only (no population).
C_ABLATIONS: tuple[str, ...] = ("nodeduction", "N1", "llm", "random", "scripted")
#: Version of the stored cell layout (`cells/<comb>_<bot>.json`); part of every cell's fingerprint.
# 2: A cells log the team reward alone; 3: B, F and O cells log their policy's own shaping.
CELL_FORMAT = 3


@dataclasses.dataclass(frozen=True)
class ProtocolConfig:
    """Everything that defines a protocol run (the paper's defaults).

    policy_a / policy_b: checkpoint directories, a shipped policy's name ("A",
      "B"; "B-paper" is the paper recipe's B on Table 3's observation), "scripted:NAME" for a reference squad of
      `jaxarena.policies.SCRIPTED` ("scripted:focus_fire", "scripted:random", ...),
      or "coder:NAME" for a white-box baseline ("coder:kite"; docs/coder.md).
    llm: "embedded" (in-process SmolLM2-135M, the default), "ollama", or
      "gguf:PATH" (a local GGUF run in-process; PATH may be ollama:NAME[:TAG]).
    model: the Ollama model (e.g. "mistral"); ignored by the embedded backend.
    decode: "choice" (the reply is one tag digit, with the model's probabilities
      where the backend has them) or "free" (Table 10's 3-token generation);
      None = the backend's default: choice for the embedded model, free (the
      paper's mode) for Ollama.
    greedy: take the policy's most likely action instead of sampling it.
    tag_a: Combination A's fixed tag (0 in the paper).
    latency_steps: ticks between a decision and its tag taking effect (0 = at once).
    num_periods: decision periods per episode; None = a full episode (120 s,
      or the scenario's `episode_s`; only tests shorten it).
    llm_path: "auto", "host" or "graph" (see `LLM_PATHS`); the graph path runs
      only the embedded model's choice decoding and reads no prompt cache (it fills it).
    scenario: a preset of `jaxarena.scenarios.SCENARIOS`, the arena of every cell.
    oracle_rollouts: K, the oracle's playouts per tag (Combination O and pricing).
    price_decisions: price every B decision with the oracle (regret, agreement).
    selector: Combination C's trained selector, a shipped name ("C") or a run
      directory of `jaxarena-train-selector`; it names its squad policy and table.
    selector_nodeduction / selector_scripted: the selectors of the "C-nodeduction"
      and "C-scripted" ablations (trained with `--deduction false` and
      `--population scripted`).
    c_ablations: the ablations played beside C (`C_ABLATIONS`; () for none).
    price_c: price every C decision with the oracle, as `price_decisions` does B's.
    """

    episodes: int = 100
    seed: int = 0
    bots: tuple[str, ...] = BOT_TYPES
    combinations: tuple[str, ...] = DEFAULT_COMBINATIONS
    policy_a: str = "A"
    policy_b: str = "B"
    greedy: bool = False
    llm: str = "embedded"
    model: str | None = None
    host: str | None = None
    decode: str | None = None
    tag_a: int = 0
    latency_steps: int = 0
    num_periods: int | None = None
    n_boot: int = 10_000
    llm_path: str = "auto"
    scenario: str = DEFAULT_SCENARIO
    oracle_rollouts: int = DEFAULT_ORACLE_ROLLOUTS
    price_decisions: bool = False
    selector: str = "C"
    selector_nodeduction: str = "C-nodeduction"
    selector_scripted: str = "C-scripted"
    c_ablations: tuple[str, ...] = C_ABLATIONS
    price_c: bool = False
    adapter: str | None = None
    tuned_adapter: str | None = None
    glance_adapter: str | None = None

    @property
    def episode_s(self) -> float:
        """The longest episode in s: the paper's 120, or the scenario's own (`raid`: 48), or shorter
        where `num_periods` cuts the episodes."""
        preset = scenario_overrides(self.scenario)
        full = float(preset.get("episode_s", EPISODE_S))
        if self.num_periods is None:
            return full
        return min(full, self.num_periods * float(preset.get("decision_period_s", DECISION_PERIOD_S)))

    def __post_init__(self):
        for b in self.bots:
            # Exact names only: they become cell names and file names.
            if b not in BOT_TYPES:
                raise ValueError(f"unknown bot {b!r}; choose from {BOT_TYPES}")
        from .combinations import get, registry

        for c in self.combinations:
            get(c)  # raises ValueError naming the combinations
        if self.episodes < 1:
            raise ValueError("episodes must be >= 1")
        parse_llm_spec(self.llm)  # raises ValueError naming the accepted forms
        if self.decode is not None and self.decode not in DECODE_MODES:
            raise ValueError(f"unknown decode mode {self.decode!r}; choose from {', '.join(DECODE_MODES)}")
        if self.llm_path not in LLM_PATHS:
            raise ValueError(f"unknown LLM path {self.llm_path!r}; choose from {', '.join(LLM_PATHS)}")
        if len(set(self.combinations)) != len(self.combinations):
            raise ValueError(f"combinations repeat: {self.combinations}")
        scenario_overrides(self.scenario)  # raises ValueError naming the presets
        if self.oracle_rollouts < 1:
            raise ValueError(f"oracle_rollouts must be >= 1, got {self.oracle_rollouts}")
        for combination in registry().values():  # each checks its own options, played or not
            combination.check(self)

    def policy_for(self, combination: str) -> str:
        if combination == "W":  # several policies: a caller that wants one has mistaken W for A
            raise ValueError("Combination W plays several squads; see protocol.combinations.w")
        if combination.split("-", 1)[0] == "C":  # C and its ablations ("C-N1", ...)
            raise ValueError(f"{combination} plays its selector's squad policy; see protocol.selector_cells")
        return self.policy_a if combination == "A" else self.policy_b

    def labels(self) -> list[str]:
        """The run's cell labels in order: the combinations as given, each followed by its variants
        (C by its ablations)."""
        from .combinations import get

        return [label for c in self.combinations for label in get(c).labels_in(self)]

    def c_labels(self) -> list[str]:
        """ "C" and its ablations' labels ("C-N1", ...), or [] when the run has no Combination C."""
        return ["C", *(f"C-{a}" for a in self.c_ablations)] if "C" in self.combinations else []

    def cells(self) -> list[tuple[str, str]]:
        """(label, bot) in run order: combination by combination, as given (A, B by default); C's
        ablations follow C, each a cell of its own."""
        return [(c, b) for c in self.labels() for b in self.bots]

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["bots"], d["combinations"] = list(self.bots), list(self.combinations)
        d["c_ablations"] = list(self.c_ablations)
        return d

    def identity_dict(self) -> dict:
        """`as_dict` without the oracle's fields where they are at their defaults.

        What the default run id hashes: a configuration that does not use the
        oracle or another scenario keeps the run id it had before they existed,
        so re-running an old command finds its run (cells of an older
        `CELL_FORMAT` are then refused, with a message naming the format).
        """
        d = self.as_dict()
        for name, default in (
            ("scenario", DEFAULT_SCENARIO),
            ("oracle_rollouts", DEFAULT_ORACLE_ROLLOUTS),
            ("price_decisions", False),
            ("price_c", False),
            ("adapter", None),
        ):
            if d[name] == default:
                del d[name]
        from .combinations import registry

        # A combination's own options change nothing without it (C's selectors): keep the older run ids.
        for name, combination in registry().items():
            if name not in self.combinations:
                for field in combination.identity_fields:
                    del d[field]
        return d


def cell_name(combination: str, bot: str) -> str:
    """ "A_balanced": the cell's name in `cells/`, `summary.json` and the timings."""
    return f"{combination}_{bot}"


def cell_key_data(seed: int, bot: str) -> np.ndarray:
    """Raw uint32 key of a cell, fold_in(PRNGKey(seed), bot_index(bot)); identical for every combination."""
    import jax

    return np.asarray(jax.random.fold_in(jax.random.PRNGKey(seed), bot_index(bot)))


def episode_sets(cell: dict) -> list[tuple[str, dict]]:
    """A stored cell's episodes as (label, episodes): ("A", ...) for most cells; F's one set per
    held tag, labelled "F0".."F3"; W's one set per squad, labelled "W:rush", ... (the label
    `episodes.csv` and `summary.json` use). Its combination says how (`Combination.episode_sets`)."""
    from .combinations import of_label

    return of_label(cell["combination"]).episode_sets(cell)

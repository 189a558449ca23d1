"""What a protocol run is: `ProtocolConfig`, its cells, their names and their keys.

A *cell* is one combination (A or B) against one bot type. Bots are named as
in `jaxarena.names.BOT_TYPES`; a cell's key is
`fold_in(PRNGKey(seed), bot_index(bot))`, the same for A and B (the paired
design) and the same whichever other bots are run.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxarena.llm.backends import parse_llm_spec
from jaxarena.llm.choice import DECODE_MODES
from jaxarena.names import BOT_TYPES, bot_index

COMBINATIONS: tuple[str, ...] = ("A", "B")
#: How B's LLM runs: "host" (TagSelector via io_callback, with the prompt cache), "graph"
#: (inside the jitted rollout, `jaxarena.llm.graph_tags`), or "auto" (see `ProtocolRunner.llm_path`).
LLM_PATHS: tuple[str, ...] = ("auto", "host", "graph")
#: Version of the stored cell layout (`cells/<comb>_<bot>.json`); part of every cell's fingerprint.
CELL_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class ProtocolConfig:
    """Everything that defines a protocol run (the paper's defaults).

    policy_a / policy_b: checkpoint directories, "A"/"B" for the shipped
      policies, or "scripted:NAME" for a reference squad of
      `jaxarena.policies.SCRIPTED` ("scripted:focus_fire", "scripted:random", ...).
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
    num_periods: decision periods per episode; None = a full 120 s episode
      (only tests shorten it).
    llm_path: "auto", "host" or "graph" (see `LLM_PATHS`); the graph path runs
      only the embedded model's choice decoding and has no prompt cache.
    """

    episodes: int = 100
    seed: int = 0
    bots: tuple[str, ...] = BOT_TYPES
    combinations: tuple[str, ...] = COMBINATIONS
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

    def __post_init__(self):
        for b in self.bots:
            # Exact names only: they become cell names and file names.
            if b not in BOT_TYPES:
                raise ValueError(f"unknown bot {b!r}; choose from {BOT_TYPES}")
        for c in self.combinations:
            if c not in COMBINATIONS:
                raise ValueError(f"unknown combination {c!r}; choose from {COMBINATIONS}")
        if self.episodes < 1:
            raise ValueError("episodes must be >= 1")
        parse_llm_spec(self.llm)  # raises ValueError naming the accepted forms
        if self.decode is not None and self.decode not in DECODE_MODES:
            raise ValueError(f"unknown decode mode {self.decode!r}; choose from {', '.join(DECODE_MODES)}")
        if self.llm_path not in LLM_PATHS:
            raise ValueError(f"unknown LLM path {self.llm_path!r}; choose from {', '.join(LLM_PATHS)}")

    def policy_for(self, combination: str) -> str:
        return self.policy_a if combination == "A" else self.policy_b

    def cells(self) -> list[tuple[str, str]]:
        """(combination, bot) in run order: all of A first (fast), then B."""
        return [(c, b) for c in self.combinations for b in self.bots]

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["bots"], d["combinations"] = list(self.bots), list(self.combinations)
        return d


def cell_name(combination: str, bot: str) -> str:
    """ "A_balanced": the cell's name in `cells/`, `summary.json` and the timings."""
    return f"{combination}_{bot}"


def cell_key_data(seed: int, bot: str) -> np.ndarray:
    """Raw uint32 key of a cell, fold_in(PRNGKey(seed), bot_index(bot)); identical for A and B."""
    import jax

    return np.asarray(jax.random.fold_in(jax.random.PRNGKey(seed), bot_index(bot)))

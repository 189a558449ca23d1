"""The LLM answering the glance prompt: one forward pass gives its answer to every prompt.

- `GlanceModel`: the option logits on every glance prompt (`llm.glance`) as a function of a
  LoRA adapter; differentiable in the adapter, so the tuning trains through it.
- `greedy_table`: each prompt's most likely answer, the table the rollout looks up.
- `load_glance_table`: a glance adapter's table, what Combination G plays; it also reads a
  glance table (`save_glance_table`): 18 x 4 logits trained without the LLM
  (`jaxarena-tune-llm glance --learner table`), played the same way.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.files import write_atomic
from jaxarena.names import NUM_TAGS

from .glance import GLANCE_SYSTEM, NUM_GLANCE_CELLS, glance_prompts
from .graph_tags import GraphTagSource
from .lora import CARD_FILE, AdapterError, LoraConfig
from .state_line import HostIds

#: The card kind of a glance table (`save_glance_table`), beside a glance adapter's "glance-adapter".
GLANCE_TABLE_KIND = "glance-table"


class GlanceModel:
    """The LLM's option logits on every glance prompt, as a function of a LoRA adapter.

    `logits(base, adapter)` is one forward pass over `NUM_GLANCE_CELLS` prompts
    (the system prefix's KV cache recomputed under the adapter); differentiable
    in `adapter`, and `adapter=None` is the base model.
    """

    def __init__(self, generator, lora: LoraConfig):
        if generator.adapter is not None:
            raise ValueError("GlanceModel needs the base model: its generator must run without an adapter")
        self.lora = lora
        self.source = GraphTagSource(generator, system=GLANCE_SYSTEM)
        self.cfg, self.base, self.base_sha256 = generator.cfg, generator.base_params, generator.sha256
        split = HostIds(generator)
        prefix = list(self.source.lines.prefix_ids)
        suffixes = []
        for user in glance_prompts():
            head, tail = split(GLANCE_SYSTEM, user)
            if list(head) != prefix:
                raise ValueError("the glance prompts do not share the system prefix the forward pass caches")
            suffixes.append(tail)
        width = max(map(len, suffixes))
        self.tokens = np.zeros((len(suffixes), width), np.int32)
        self.n_pad = np.asarray([width - len(s) for s in suffixes], np.int32)
        for row, tail in enumerate(suffixes):
            self.tokens[row, self.n_pad[row] :] = tail

    def logits(self, base, adapter) -> jax.Array:
        """(NUM_GLANCE_CELLS, 4) option logits; jittable."""
        arrays = self.source.arrays_with(base, adapter, self.lora)
        return self.source.logits(arrays, jnp.asarray(self.tokens), jnp.asarray(self.n_pad))


def greedy_table(logits) -> np.ndarray:
    """Each cell's most likely answer, (NUM_GLANCE_CELLS,) int32."""
    return np.asarray(jnp.argmax(logits, axis=-1), np.int32)


def load_glance_table(spec: str) -> tuple[np.ndarray, str]:
    """(the table of most likely answers, its checksum) of a glance adapter or a glance table; `spec` a name or a
    directory. A glance table's answers are read from its card, without the LLM.

    Raises `AdapterError` for a missing, corrupt or foreign adapter (one for Table 10's prompt, or another model).
    """
    from .adapters import resolve_adapter
    from .backends.embedded import EmbeddedBackend
    from .lora import load_adapter

    directory = resolve_adapter(spec, kind=("glance-adapter", GLANCE_TABLE_KIND))
    if _card(directory).get("kind") == GLANCE_TABLE_KIND:
        logits, checksum = read_glance_table(directory)
        return greedy_table(logits), checksum
    generator = EmbeddedBackend().load()
    loaded = load_adapter(directory, generator.cfg, generator.sha256)
    model = GlanceModel(generator, loaded.lora)
    return greedy_table(jax.jit(model.logits)(model.base, loaded.adapter)), loaded.checksum


def table_checksum(logits) -> str:
    """sha256 over a glance table's (NUM_GLANCE_CELLS, 4) float32 logits."""
    arr = np.ascontiguousarray(np.asarray(logits, np.float32))
    return hashlib.sha256(f"glance-table{arr.shape}".encode() + arr.tobytes()).hexdigest()


def save_glance_table(directory: str | Path, logits, card: dict) -> Path:
    """Write a glance table's card (its logits, exact as float32, the checksum, and whatever `card` holds)."""
    arr = np.asarray(logits, np.float32)
    if arr.shape != (NUM_GLANCE_CELLS, NUM_TAGS):
        raise ValueError(f"a glance table is ({NUM_GLANCE_CELLS}, {NUM_TAGS}) logits, got {arr.shape}")
    full = {**card, "kind": GLANCE_TABLE_KIND, "logits": arr.tolist(), "checksum": table_checksum(arr)}
    return write_atomic(Path(directory) / CARD_FILE, json.dumps(full, indent=2, sort_keys=True)).parent


def read_glance_table(directory: str | Path) -> tuple[np.ndarray, str]:
    """(the (NUM_GLANCE_CELLS, 4) float32 logits, the checksum) of a glance table; AdapterError if corrupt."""
    card = _card(directory)
    try:
        logits = np.asarray(card["logits"], np.float32)
        recorded = card["checksum"]
    except (KeyError, TypeError, ValueError) as exc:
        raise AdapterError(f"{directory}: an incomplete glance table card ({type(exc).__name__}: {exc})") from None
    if logits.shape != (NUM_GLANCE_CELLS, NUM_TAGS) or recorded != table_checksum(logits):
        raise AdapterError(f"{directory}: the glance table's logits do not match its checksum; corrupt or edited")
    return logits, recorded


def _card(directory: str | Path) -> dict:
    try:
        card = json.loads((Path(directory) / CARD_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise AdapterError(f"{directory}: unreadable card ({type(exc).__name__}: {exc})") from None
    if not isinstance(card, dict):
        raise AdapterError(f"{directory}: the card is not a JSON object")
    return card

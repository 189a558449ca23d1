"""The tag model being tuned: the in-graph LLM's 4-way choice as a function of a LoRA adapter.

`TagModel` pairs a `GraphTagSource` (the prompt rendered from the five
Table 10 numbers on the device, the option tokens, the forward pass) with a
`LoraConfig` and the adapter being trained. `option_logits(base, adapter,
features)` is the same computation the rollout's tag source runs, so what is
trained is exactly what plays; it is differentiable in `adapter` and takes
the base weights as an argument (see `GraphTagSource.arrays_with`).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..graph_tags import GraphTagSource
from ..lora import LoadedAdapter, LoraConfig, init_adapter
from ..prompt import format_state

#: States per forward pass when scoring many states outside training.
SCORE_CHUNK = 32


class TagModel:
    """The embedded model (or a GGUF the graph path reads) with a LoRA adapter over its tag choice.

    Args:
      source: the `GraphTagSource` of the base model (its generator has no adapter).
      lora: the adapter's rank and targets.
      adapter: the adapter's arrays (None: a fresh, zero adapter).
    """

    def __init__(self, source: GraphTagSource, lora: LoraConfig, adapter=None, key=None):
        if source.generator.adapter is not None:
            raise ValueError("TagModel needs the base model's source: its generator must run without an adapter")
        self.source = source
        self.lora = lora
        self.cfg = source.generator.cfg
        self.base = source.generator.base_params
        self.base_sha256 = source.generator.sha256
        if adapter is None:
            adapter = init_adapter(self.cfg, lora, key if key is not None else jax.random.key(0))
        self.adapter = adapter
        self._arrays = jax.jit(partial(_arrays, source, lora))
        self._logits = jax.jit(partial(option_logits, source, lora))

    @classmethod
    def load(cls, *, limits: dict, adapter: LoadedAdapter | str | None = None, lora: LoraConfig | None = None):
        """The embedded SmolLM2 with Table 10's sampling, prompts written with `limits` (bot/NPC max HP)."""
        from ..adapters import resolve_adapter
        from ..backends.embedded import EmbeddedBackend
        from ..lora import load_adapter

        source = GraphTagSource.from_backend(EmbeddedBackend(), **limits)
        if isinstance(adapter, str) or hasattr(adapter, "__fspath__"):
            directory = resolve_adapter(str(adapter), kind="llm-adapter")  # a shipped name or a directory
            adapter = load_adapter(directory, source.generator.cfg, source.generator.sha256)
        if isinstance(adapter, LoadedAdapter):
            return cls(source, adapter.lora, adapter.adapter)
        return cls(source, lora or LoraConfig())

    def zero_adapter(self):
        """An adapter with B = 0 under this config: the stock model, exactly."""
        return init_adapter(self.cfg, self.lora, jax.random.key(0))

    def arrays(self, adapter) -> dict:
        """The tag source's device arrays under `adapter` (for `initial_state()["arrays"]`)."""
        return self._arrays(self.base, adapter)

    def logits(self, adapter, features) -> jax.Array:
        """(M, 4) option logits for features (M, 5), one forward pass (jitted per M)."""
        return self._logits(self.base, adapter, jnp.asarray(features, jnp.float32))

    def probs(self, features, adapter=None) -> np.ndarray:
        """(M, 4) choice probabilities, in chunks of `SCORE_CHUNK` (the last padded)."""
        adapter = self.adapter if adapter is None else adapter
        f = np.asarray(features, np.float32)
        out = []
        for start in range(0, len(f), SCORE_CHUNK):
            chunk = f[start : start + SCORE_CHUNK]
            pad = np.concatenate([chunk, np.repeat(chunk[:1], SCORE_CHUNK - len(chunk), 0)])
            out.append(np.asarray(jax.nn.softmax(self.logits(adapter, pad), -1))[: len(chunk)])
        return np.concatenate(out) if out else np.zeros((0, 4), np.float32)

    def prompt_texts(self, features) -> list[str]:
        """The exact user message of each state's prompt."""
        return [format_state(*map(float, row), **self.source.lines.limits) for row in np.asarray(features)]


def _arrays(source: GraphTagSource, lora: LoraConfig, base: dict, adapter) -> dict:
    return source.arrays_with(base, adapter, lora)


def option_logits(source: GraphTagSource, lora: LoraConfig, base: dict, adapter, features: jax.Array) -> jax.Array:
    """(M, 4) option logits of the prompts of `features` (M, 5) under `adapter`; differentiable, jittable."""
    arrays = source.arrays_with(base, adapter, lora)
    tokens, n_pad = source.lines.tokens(features)
    return source.logits(arrays, tokens, n_pad)

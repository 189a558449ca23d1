"""Batched, jitted text generation for the embedded SmolLM2.

How a batch of chat prompts becomes replies:

1. Each prompt is rendered with ChatML and tokenized. Its *shared prefix* is the
   token ids of everything before the user message (system turn + the opening
   of the user turn). The prefix is matched in token ids, not text, because BPE
   may merge across the boundary; a prompt whose ids do not start with its
   system prefix falls back to the longest common prefix.
2. The prefix's KV cache is computed once (padded to a multiple of
   `PREFIX_BLOCK` so that different system prompts share one compiled program)
   and reused by every batch that shares it.
3. The rest (the state line + the assistant opening) is left-padded to one of
   a few bucket lengths, and the batch to one of a few bucket sizes, so a run
   compiles a handful of programs and then never again.
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
import hashlib
import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import model as M
from .tokenizer import ChatTokenizer, chatml, chatml_prefix
from .weights import LoadedModel, load_model

PREFIX_BLOCK = 32
DEFAULT_BATCH_BUCKETS = (1, 4, 8, 16, 32)
DEFAULT_SUFFIX_BUCKETS = (32, 64, 128, 256, 512)


@dataclasses.dataclass(frozen=True)
class Generation:
    """One prompt's result: decoded text, new token ids, and an error if any.

    `first_logits` holds the float32 logits of the first generated position
    (only when asked for; used by tests and analysis).
    """

    text: str
    token_ids: tuple[int, ...]
    error: str | None = None
    first_logits: np.ndarray | None = None


def prompt_rng_key(system: str, user: str, seed: int) -> np.ndarray:
    """Raw threefry key data (2 × uint32) from a hash of the prompt and seed.

    Hashing the text (not the position in a batch) is what makes sampling
    reproducible regardless of batch composition.
    """
    h = hashlib.blake2b(digest_size=8)
    h.update(seed.to_bytes(8, "little", signed=True))
    h.update(system.encode("utf-8"))
    h.update(b"\x00")
    h.update(user.encode("utf-8"))
    return np.frombuffer(h.digest(), dtype=np.uint32).copy()


def sample_token(logits: jax.Array, key: jax.Array, temperature, top_p, top_k: int) -> jax.Array:
    """Sample one token id from (V,) logits; temperature <= 0 means greedy.

    Order as Ollama's sampler: keep the top-k logits, divide by temperature,
    keep the smallest set whose probability reaches top_p (at least one token),
    then draw.
    """
    vals, idx = jax.lax.top_k(logits, top_k)  # sorted, descending
    t = jnp.maximum(temperature, 1e-6)
    scaled = vals / t
    probs = jax.nn.softmax(scaled)
    before = jnp.cumsum(probs) - probs  # mass of strictly better tokens
    keep = before < top_p
    choice = jax.random.categorical(key, jnp.where(keep, scaled, -jnp.inf))
    # Select the position first and gather once: `where(t > 0, idx[choice], idx[0])`
    # made XLA:CPU replace the fast top-k by a full sort (0.26 s per call).
    return idx[jnp.where(temperature > 0, choice, 0)]


def _sample_rows(logits, key_data, step, temperature, top_p, top_k: int):
    """Sample one token per row; row keys are folded with the step index."""
    keys = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    return jax.vmap(lambda lg, k: sample_token(lg, jax.random.fold_in(k, step), temperature, top_p, top_k))(
        logits, keys
    )


def _read_program(cfg, top_k, max_new, params, pk, pv, p_valid, p_len, tokens, n_pad, key_data, temperature, top_p):
    """Read left-padded suffixes after the shared prefix and sample the first token.

    tokens: (B, S) int32, left-padded; n_pad: (B,) pad count per row.
    Returns (first token (B,), its logits (B, V) f32, own_k, own_v) where the own
    caches have S + max_new - 1 slots: the suffix, then the tokens fed back.
    """
    B, S = tokens.shape
    own_len = S + max_new - 1
    slots = jnp.arange(own_len)
    own_valid = slots[None, :] >= n_pad[:, None]  # (B, own_len)
    positions = jnp.maximum(p_len + jnp.arange(S)[None, :] - n_pad[:, None], 0)
    causal = jnp.arange(S)[:, None] >= slots[None, :]
    o_mask = causal[None] & own_valid[:, None, :]
    kv_zero = jnp.zeros((B, own_len, cfg.n_kv_heads, cfg.head_dim), params["embed"].dtype)
    own = (kv_zero,) * cfg.n_layers
    x, own_k, own_v = M.layers_forward(
        cfg, params, M.embed(params, tokens), positions, pk, pv, p_valid, o_mask, own, own, 0
    )
    logits = M.lm_head(cfg, params, x[:, -1])
    return _sample_rows(logits, key_data, 0, temperature, top_p, top_k), logits, own_k, own_v


def _decode_program(
    cfg, top_k, params, pk, pv, p_valid, n_pad, own_k, own_v, tok, slot, positions, step, key_data, temperature, top_p
):
    """Feed back one token per row and sample the next.

    tok: (B,) last sampled tokens, written at own slot `slot` with RoPE
    `positions` (B,). Returns (next token (B,), own_k, own_v).

    Kept as its own jitted program: fused into the read program (by scan or by
    unrolling) the two decode steps cost 3-5x more on XLA:CPU than as
    separate calls.
    """
    own_len = own_k[0].shape[1]
    slots = jnp.arange(own_len)
    mask = ((slots[None, :] >= n_pad[:, None]) & (slots[None, :] <= slot))[:, None, :]
    x, own_k, own_v = M.layers_forward(
        cfg, params, M.embed(params, tok[:, None]), positions[:, None], pk, pv, p_valid, mask, own_k, own_v, slot
    )
    logits = M.lm_head(cfg, params, x[:, 0])
    return _sample_rows(logits, key_data, step, temperature, top_p, top_k), own_k, own_v


def _prefix_program(cfg, params, tokens, valid):
    """KV cache of one right-padded prefix: (k, v), tuples of (P, KV, D) per layer."""
    P = tokens.shape[1]
    pk, pv, p_valid = M.empty_prefix(cfg, params["embed"].dtype)
    o_mask = jnp.tril(jnp.ones((P, P), bool))[None] & valid[:, None, :]
    positions = jnp.arange(P)[None, :]
    _, k, v = M.layers_forward(cfg, params, M.embed(params, tokens), positions, pk, pv, p_valid, o_mask)
    return tuple(x[0] for x in k), tuple(x[0] for x in v)


@dataclasses.dataclass
class _Prefix:
    ids: tuple[int, ...]
    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    valid: jax.Array
    length: int


class SmolLM2Generator:
    """Loads SmolLM2 once and generates short replies for batches of chat prompts.

    Thread-safe (one batch at a time). Compiled programs are keyed by
    (batch bucket, suffix bucket, prefix blocks) and reused for the life of the
    object. `dtype=jnp.float32` runs in float32 (slower; used by tests for tight
    comparisons); the default keeps the bf16 weights.
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
    ):
        loaded = loaded if loaded is not None else load_model(gguf_path)
        # Keep metadata, not the host copy of the weights (~270 MB once on device).
        self.cfg = loaded.config
        self.fields = loaded.fields
        self.gguf_path, self.sha256 = loaded.gguf_path, loaded.sha256
        self.tokenizer = ChatTokenizer(loaded.fields)
        self.params = M.params_to_device(loaded.weights, dtype)
        self.max_new_tokens = int(max_new_tokens)
        self.top_k = int(top_k)
        self.seed = int(seed)
        self.batch_buckets = tuple(sorted(batch_buckets))
        self.suffix_buckets = tuple(sorted(suffix_buckets))
        self.max_batch = self.batch_buckets[-1]
        self._lock = threading.Lock()
        self._prefixes: collections.OrderedDict[tuple[int, ...], _Prefix] = collections.OrderedDict()
        self._prefix_cache_size = prefix_cache_size
        self._system_ids_cache: dict[str, list[int]] = {}
        cfg = self.cfg
        self._read = jax.jit(partial(_read_program, cfg, self.top_k, self.max_new_tokens))
        # Donating the caches lets XLA update them in place.
        self._decode = jax.jit(partial(_decode_program, cfg, self.top_k), donate_argnums=(5, 6))
        self._pre = jax.jit(partial(_prefix_program, cfg))
        self._full = jax.jit(partial(M.full_forward, cfg))

    # ----------------------------------------------------------------- prefix
    def _prefix(self, ids: tuple[int, ...]) -> _Prefix:
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
        k, v = self._pre(self.params, toks, valid[None])
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
            cache[system] = self.tokenizer.encode(chatml_prefix(system))
        return cache[system]

    # ------------------------------------------------------------- generation
    def _bucket(self, n: int, buckets: Sequence[int]) -> int | None:
        for b in buckets:
            if n <= b:
                return b
        return None

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
            return self._generate_locked(pairs, float(temperature), float(top_p), return_logits)

    def _generate_locked(self, prompts, temperature, top_p, return_logits):
        # Identical prompts get identical replies (the sampling key is a hash of
        # the text), so each distinct prompt is computed once.
        unique = list(dict.fromkeys(prompts))
        where = {p: i for i, p in enumerate(unique)}
        results: list[Generation | None] = [None] * len(unique)
        all_ids = self.tokenizer.encode_batch([chatml(s, u) for s, u in unique])

        groups: dict[tuple[int, ...], list[tuple[int, list[int]]]] = collections.defaultdict(list)
        max_suffix = self.suffix_buckets[-1]
        for i, ((system, _), ids) in enumerate(zip(unique, all_ids, strict=True)):
            k = self.split_prefix(system, ids)
            suffix = ids[k:]
            total = len(ids) + self.max_new_tokens
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
            prefix = self._prefix(prefix_ids)
            # Sorting by length keeps each chunk's padding small.
            items.sort(key=lambda it: len(it[1]))
            for start in range(0, len(items), self.max_batch):
                chunk = items[start : start + self.max_batch]
                outs = self._run_chunk(prefix, chunk, unique, temperature, top_p, return_logits)
                for (i, _), gen in zip(chunk, outs, strict=True):
                    results[i] = gen
        return [results[where[p]] for p in prompts]

    def _run_chunk(self, prefix, chunk, prompts, temperature, top_p, return_logits):
        B = self._bucket(len(chunk), self.batch_buckets)
        S = self._bucket(max(len(s) for _, s in chunk), self.suffix_buckets)
        tokens = np.zeros((B, S), np.int32)
        n_pad = np.full((B,), S - 1, np.int32)  # filler rows: one token, ignored
        key_data = np.zeros((B, 2), np.uint32)
        for r, (i, suffix) in enumerate(chunk):
            tokens[r, S - len(suffix) :] = suffix
            n_pad[r] = S - len(suffix)
            key_data[r] = prompt_rng_key(prompts[i][0], prompts[i][1], self.seed)
        new, logits0 = self._run_program(prefix, tokens, n_pad, key_data, temperature, top_p, len(chunk))
        logits0 = np.asarray(logits0) if return_logits else None
        out = []
        for r in range(len(chunk)):
            ids = []
            for t in new[r].tolist():
                if t in self.tokenizer.stop_ids:
                    break
                ids.append(t)
            out.append(
                Generation(self.tokenizer.decode(ids), tuple(ids), None, logits0[r] if logits0 is not None else None)
            )
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
        """Next-token logits (V,) from the plain, uncached forward (reference path)."""
        ids = self.tokenizer.encode(chatml(system, user))
        T = self._bucket(len(ids), (64, 128, 256, 512, 1024, 2048)) or len(ids)
        toks = np.zeros((1, T), np.int32)
        toks[0, : len(ids)] = ids
        valid = (np.arange(T) < len(ids))[None]
        return np.asarray(self._full(self.params, toks, valid))[0, len(ids) - 1]

    def warmup(self, system: str, batch_sizes: Sequence[int] | None = None, suffix_len: int = 64) -> None:
        """Compile the programs a run will use (prefix, and each batch bucket)."""
        ids = tuple(self._system_ids(system))
        prefix = self._prefix(ids)
        for b in batch_sizes or self.batch_buckets:
            S = self._bucket(suffix_len, self.suffix_buckets)
            B = self._bucket(b, self.batch_buckets)
            B_tokens = np.zeros((B, S), np.int32)
            out = self._run_program(
                prefix, B_tokens, np.full((B,), S - 1, np.int32), np.zeros((B, 2), np.uint32), 0.1, 0.9
            )
            jax.block_until_ready(out)

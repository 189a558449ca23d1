"""The LLM as a jittable tag source: Table 10 prompts tokenized on the device, no host callback.

The host path (`selector.TagSelector`) leaves the jitted rollout once per
decision period: it formats each prompt, tokenizes it, asks the backend and
comes back. `GraphTagSource` does the same work inside the rollout's XLA
program, for the embedded model's choice decoding:

1. *Prompt tokens on the device* (`state_line.StateLineTokens`): the state
   line's fixed pieces tokenized once, its numbers rendered as digit tokens
   exactly as Python formats them, checked against the host path's
   tokenizer at build time (a tokenizer that merges digits is refused).
2. *Only what is needed is computed.* Ended episodes are skipped; identical
   prompts of a period (same rounded numbers) are computed once, as the host
   path does within one call; an answer cache carried across the rollout's
   periods (`tag_fn`, a `jaxarena.tag_sources.TagSource` with a carry) serves prompts met
   in earlier periods. The prompts left are packed to the front and run in
   chunks of `chunk_sizes` (a `lax.while_loop` per chunk size, so a period
   costs the chunks its new prompts need, not the batch size).
3. *The forward pass* is the host path's own program
   (`programs.option_logits_program`) after the same cached system prefix.
4. *Choice* follows `choice.choose_option`: the four option logits, temperature
   then top_p, one draw. The draw's key is a hash of the prompt's token ids and
   the seed (`prompt_key_data`), so it depends on the prompt only, never on the
   batch. It is not the host path's key (a blake2b of the text drawn with
   numpy), so the two paths can differ where the nucleus keeps two or more
   options; with Table 10's temperature 0.1 that needs two options within a
   factor ~1.25 of each other, which the protocol's runs do not show (see
   docs/llm.md for the measured agreement).

`tag_fn`'s aux holds the option logits, the renormalised probabilities, the
previous tags and the period's game time, so `graph_records.GraphRecords`
(`records`) writes the same decision records as the host path. The on-disk
prompt cache (`cache.PromptCache`) is not read here: every run computes its
prompts. `GraphRecords.cache_entries` turns them into cache entries
afterwards, so a later host-path run finds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.names import BOT_MAX_HP, NPC_MAX_HP, NUM_NPCS, NUM_TAGS

from . import programs as P
from .graph_records import GraphRecords
from .prompt import SYSTEM
from .state_line import HOST_PATH_HINT, HostIds, StateLineTokens, UnsupportedTokenizer, _option_tokens

#: Chunk sizes of the in-graph forward passes: big chunks while many prompts
#: remain, then small ones, so a period pads at most `chunk_sizes[-1] - 1` rows.
DEFAULT_CHUNK_SIZES = (32, 8)
#: Prompts the in-graph answer cache holds per rollout (a cell of the protocol meets ~1,000).
DEFAULT_CACHE_SIZE = 4096
_EMPTY = 0xFFFFFFFF  # an empty cache slot; `_pack_key` never produces it


def _pack_key(ints: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A prompt's numbers in one uint32 (bot 9 bits, avg 6, alive 3, moving 1, tenths 13), and whether they fit."""
    bot, avg, alive, moving, whole, tenth = (ints[:, i].astype(jnp.uint32) for i in range(6))
    tenths = whole * 10 + tenth
    fits = (bot < 512) & (avg < 64) & (alive < 8) & (tenths < 8191)
    packed = (bot << 23) | (avg << 17) | (alive << 14) | (moving << 13) | jnp.minimum(tenths, 8190)
    return packed, fits


# ----------------------------------------------------------------- sampling
def _fmix32(h: jax.Array) -> jax.Array:
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def prompt_key_data(tokens: jax.Array, n_pad: jax.Array, salt: int) -> jax.Array:
    """Raw threefry key data (N, 2) uint32 from each row's real token ids and `salt`.

    Independent of the padding (positions count from the right end) and of
    the batch, so a prompt always gets the same draw.
    """
    n, width = tokens.shape
    from_right = jnp.arange(width)[::-1].astype(jnp.uint32)
    valid = jnp.arange(width)[None, :] >= n_pad[:, None]
    t = tokens.astype(jnp.uint32)
    words = []
    for w in range(2):
        s = jnp.uint32((salt * (2 * w + 1) + 0x9E3779B9 * (w + 1)) & 0xFFFFFFFF)
        mixed = _fmix32(t * jnp.uint32(0x9E3779B1) + (from_right[None] + 1) * jnp.uint32(0x85EBCA77) + s)
        words.append(_fmix32(jnp.sum(jnp.where(valid, mixed, 0), axis=1, dtype=jnp.uint32) ^ s))
    return jnp.stack(words, axis=-1)


def choose_options(logits: jax.Array, key_data: jax.Array, temperature: float, top_p: float) -> jax.Array:
    """Index of the chosen option per row (N,), as `choice.choose_option` draws it; jittable."""
    if temperature <= 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def one(lg, kd):
        p = jax.nn.softmax(lg / temperature)
        order = jnp.argsort(-p, stable=True)
        ps = p[order]
        keep = P.nucleus_keep(ps, top_p).at[0].set(True)  # the best option stays, even at top_p <= 0
        q = jnp.where(keep, ps, 0.0)
        u = jax.random.uniform(jax.random.wrap_key_data(kd, impl="threefry2x32")) * q.sum()
        k = jnp.minimum(jnp.searchsorted(jnp.cumsum(q), u, side="right"), keep.sum() - 1)
        return order[k].astype(jnp.int32)

    return jax.vmap(one)(logits, key_data)


# ----------------------------------------------------------------- the source
class GraphTagSource:
    """The embedded model's choice decoding as a jittable tag source (see the module docstring).

    Args:
      generator: a `generate.SmolLM2Generator` (e.g. `EmbeddedBackend(...).load()`);
        its weights, prefix program and tokenizer are used.
      temperature, top_p: Table 10's sampling (0.1, 0.9); 0 is greedy.
      seed: mixed into every prompt's key.
      chunk_sizes: rows per forward pass, largest first (see the module docstring).
      cache_size: prompts the in-graph answer cache holds per rollout (see `tag_fn`).
      system, bot_max_hp, npc_max_hp, num_npcs: the prompt, as in `build_prompt`.
      backend_name, model, options: identify the decisions in the records
        (`prompt_hash` is the host path's cache key of the same prompt).

    Raises `UnsupportedTokenizer` (a ValueError) when the model's tokenizer
    does not split the state line as fixed pieces + digit tokens.
    """

    def __init__(
        self,
        generator,
        *,
        temperature: float = 0.1,
        top_p: float = 0.9,
        seed: int = 0,
        chunk_sizes: Sequence[int] = DEFAULT_CHUNK_SIZES,
        cache_size: int = DEFAULT_CACHE_SIZE,
        system: str = SYSTEM,
        bot_max_hp: float = BOT_MAX_HP,
        npc_max_hp: float = NPC_MAX_HP,
        num_npcs: int = NUM_NPCS,
        backend_name: str = "embedded",
        model: str | None = None,
        options: dict | None = None,
    ):
        self.generator = generator
        self.temperature, self.top_p, self.seed = float(temperature), float(top_p), int(seed)
        self.chunk_sizes = tuple(sorted({int(c) for c in chunk_sizes}, reverse=True))
        if not self.chunk_sizes or self.chunk_sizes[-1] < 1:
            raise ValueError(f"chunk_sizes must be positive integers, got {chunk_sizes}")
        self.cache_size = int(cache_size)
        self.system = system
        self.lines = StateLineTokens(
            generator.tokenizer.encode,
            HostIds(generator),
            system,
            bot_max_hp=bot_max_hp,
            npc_max_hp=npc_max_hp,
            num_npcs=num_npcs,
            lead=_option_tokens(generator)[0],
        )
        self.option_ids = _option_tokens(generator)[1]
        prefix = generator.prefix_cache(tuple(self.lines.prefix_ids))
        self.prefix_len = int(prefix.length)
        # The system prefix as the prefix program reads it, to rebuild its KV cache under another adapter.
        self._prefix_tokens = np.zeros((1, prefix.valid.shape[0]), np.int32)
        self._prefix_tokens[0, : self.prefix_len] = self.lines.prefix_ids
        #: The device arrays the forward pass reads (weights, the system prefix's KV cache).
        self.arrays = {"params": generator.params, "pk": prefix.k, "pv": prefix.v, "p_valid": prefix.valid}
        self._salt = (self.seed * 0x2545F491 + _host_hash(self.lines.prefix_ids)) & 0xFFFFFFFF
        self.identity = {
            "backend": backend_name,
            "model": model if model is not None else _default_model(),
            "options": dict(options) if options is not None else {"temperature": temperature, "top_p": top_p},
        }
        #: The host-side views of a rollout of `tag_fn`: decision records, cache entries, counters.
        self.records = GraphRecords(self.identity, self.lines.limits)

    @classmethod
    def from_backend(cls, backend, **kwargs) -> GraphTagSource:
        """The in-graph twin of an in-process backend in choice decoding (its model, sampling and identity).

        `backend.load()` must return the generator (`EmbeddedBackend` does).
        """
        if not hasattr(backend, "load") or getattr(backend, "decode", None) != "choice":
            raise UnsupportedTokenizer(
                f"the in-graph path runs an in-process model's choice decoding, not backend "
                f"{getattr(backend, 'name', backend)!r} with decode={getattr(backend, 'decode', None)!r}; "
                + HOST_PATH_HINT
            )
        opts = backend.options
        return cls(
            backend.load(),
            temperature=opts["temperature"],
            top_p=opts["top_p"],
            seed=getattr(backend, "seed", 0),
            backend_name=backend.name,
            model=backend.model,
            options=opts,
            **kwargs,
        )

    # -------------------------------------------------------------- device
    def arrays_with(self, base_params: dict, adapter, lora_config) -> dict:
        """The device arrays for `base_params` (`generator.base_params`) with LoRA `adapter`; jittable.

        The system prefix's KV cache is recomputed, since the adapter changes
        every layer's keys and values. Differentiable in `adapter`. Pass the
        base params as an argument of the compiled program: closed over, they
        become constants that XLA may multiply in another order, and a zero
        adapter would then not reproduce `arrays` bit for bit.
        """
        from .lora import attach

        params = attach(base_params, adapter, lora_config)
        valid = self.arrays["p_valid"]
        pk, pv = P.prefix_program(self.generator.cfg, params, jnp.asarray(self._prefix_tokens), valid[None])
        return {"params": params, "pk": pk, "pv": pv, "p_valid": valid}

    def logits(self, arrays: dict, tokens: jax.Array, n_pad: jax.Array) -> jax.Array:
        """Option logits (B, K) float32 for left-padded suffix rows: one forward pass."""
        cfg = self.generator.cfg
        return P.option_logits_program(
            cfg,
            arrays["params"],
            arrays["pk"],
            arrays["pv"],
            arrays["p_valid"],
            jnp.int32(self.prefix_len),
            tokens,
            n_pad,
            jnp.asarray(self.option_ids),
        )

    def apply(self, arrays: dict, features, prev_tags, done, time_s, key=None):
        """`tag_fn` with the device arrays as an argument: -> (tags (N,), aux); no answer cache."""
        tags, aux, _ = self.apply_cached(arrays, None, features, prev_tags, done, time_s, key)
        return tags, aux

    def init_cache(self, num_episodes: int = 0) -> dict:
        """An empty in-graph answer cache: sorted prompt keys (empty = all ones) and their option logits."""
        return {
            "keys": jnp.full((self.cache_size,), _EMPTY, jnp.uint32),
            "logits": jnp.zeros((self.cache_size, NUM_TAGS), jnp.float32),
        }

    def apply_cached(self, arrays: dict, cache: dict | None, features, prev_tags, done, time_s, key=None):
        """One decision period: -> (tags (N,), aux, cache). With `cache` None nothing is looked up or kept."""
        del key  # the draw is keyed by the prompt, as on the host path
        n = features.shape[0]
        ints = self.lines.render(features)
        tokens, n_pad = self.lines.tokens_of(ints)
        active = ~done
        need = active
        if cache is not None:
            packed, cacheable = _pack_key(ints)
            pos = jnp.clip(jnp.searchsorted(cache["keys"], packed), 0, self.cache_size - 1)
            hit = active & cacheable & (cache["keys"][pos] == packed)
            need = active & ~hit
        # Rows to compute first, identical prompts next to each other (the ints determine the prompt).
        order = jnp.lexsort(tuple(ints[:, i] for i in reversed(range(ints.shape[1]))) + (~need,))
        s_ints, s_need = ints[order], need[order]
        differs = jnp.any(s_ints != jnp.roll(s_ints, 1, axis=0), axis=1).at[0].set(True)
        first = s_need & differs
        group_sorted = jnp.cumsum(first) - 1
        n_unique = first.sum()
        rep = jnp.zeros((n,), jnp.int32).at[jnp.where(first, group_sorted, n)].set(order, mode="drop")
        group = jnp.zeros((n,), jnp.int32).at[order].set(jnp.maximum(group_sorted, 0))
        out = self._chunked_logits(arrays, tokens[rep], n_pad[rep], n_unique)
        logits = out[group]
        if cache is not None:
            logits = jnp.where(hit[:, None], cache["logits"][pos], logits)
            fresh = (jnp.arange(n) < n_unique) & cacheable[rep]
            keys = jnp.concatenate([cache["keys"], jnp.where(fresh, packed[rep], jnp.uint32(_EMPTY))])
            kept = jnp.argsort(keys, stable=True)[: self.cache_size]  # a full cache keeps its smallest keys
            cache = {"keys": keys[kept], "logits": jnp.concatenate([cache["logits"], out[:n]])[kept]}
        u_keys = prompt_key_data(tokens, n_pad, self._salt)
        chosen = choose_options(logits, u_keys, self.temperature, self.top_p)
        tags = jnp.where(active, chosen, prev_tags).astype(jnp.int32)
        aux = {
            "logits": logits,
            "probs": jax.nn.softmax(logits, axis=-1),
            "prev_tags": prev_tags.astype(jnp.int32),
            "time_s": jnp.asarray(time_s, jnp.float32),
            "computed": n_unique.astype(jnp.int32),
        }
        return tags, aux, cache

    def _chunked_logits(self, arrays, tokens, n_pad, count) -> jax.Array:
        """Option logits of the first `count` rows, (N, K), in chunks of `chunk_sizes` (later rows zero)."""
        n, width = tokens.shape
        big = self.chunk_sizes[0]
        # Padded so that no chunk's slice runs past the end (dynamic_slice would shift it back).
        tokens = jnp.concatenate([tokens, jnp.zeros((big, width), jnp.int32)])
        n_pad = jnp.concatenate([n_pad, jnp.full((big,), width - 1, jnp.int32)])
        out = jnp.zeros((n + big, NUM_TAGS), jnp.float32)
        start = jnp.int32(0)
        for i, c in enumerate(self.chunk_sizes):
            last = i == len(self.chunk_sizes) - 1
            # Big chunks only while they are full; the smallest covers what is left.
            stop = count if last else start + (count - start) // c * c

            def body(state, c=c):
                s, acc = state
                rows = jax.lax.dynamic_slice_in_dim(tokens, s, c)
                pads = jax.lax.dynamic_slice_in_dim(n_pad, s, c)
                return s + c, jax.lax.dynamic_update_slice_in_dim(acc, self.logits(arrays, rows, pads), s, 0)

            start, out = jax.lax.while_loop(lambda st, stop=stop: st[0] < stop, body, (start, out))
        return out[:n]

    def tag_fn(self, cache: bool = True):
        """The tag source for `jaxarena.runner`: tags and aux each period.

        With `cache` (default) a `TagSource` whose carry is the device arrays
        and an answer cache that keeps every answer of the rollout (up to
        `cache_size` prompts), so a prompt met again in a later period is not
        recomputed (its answer is the same: the draw is keyed by the prompt).
        Pass `initial_state()` as `run(..., tag_state=...)` to give the
        weights to the compiled program as an argument; without it they are
        closed over and baked in as constants (compiles ~1.7x slower,
        measured). With `cache=False`, a plain `fn(features, prev_tags, done,
        time_s, key) -> (tags, aux)` closing over the weights.
        """
        from jaxarena.tag_sources import TagSource

        if not cache:
            return partial(self.apply, self.arrays)
        return TagSource(self._step, lambda n: self.initial_state())

    def initial_state(self) -> dict:
        """The tag source's carry at a rollout's start: the device arrays and an empty answer cache."""
        return {"arrays": self.arrays, "cache": self.init_cache()}

    def _step(self, carry, features, prev_tags, done, time_s, key, state=None, params=None):
        tags, aux, cache = self.apply_cached(carry["arrays"], carry["cache"], features, prev_tags, done, time_s, key)
        return tags, aux, {"arrays": carry["arrays"], "cache": cache}

    def choose(self, features) -> tuple[np.ndarray, dict]:
        """Tags and aux for a batch of states, all active (tests and benchmarks)."""
        if not hasattr(self, "_jit_apply"):
            self._jit_apply = jax.jit(self.apply)
        f = jnp.asarray(features, jnp.float32)
        n = f.shape[0]
        tags, aux = self._jit_apply(self.arrays, f, jnp.zeros((n,), jnp.int32), jnp.zeros((n,), bool), 0.0)
        return np.asarray(tags), jax.tree.map(np.asarray, aux)


def _default_model() -> str:
    from .backends.embedded import MODEL_NAME

    return MODEL_NAME


def _host_hash(ids: Sequence[int]) -> int:
    h = 0x811C9DC5
    for t in ids:
        h = ((h ^ (int(t) & 0xFFFFFFFF)) * 0x01000193) & 0xFFFFFFFF
    return h


__all__ = ["DEFAULT_CHUNK_SIZES", "GraphTagSource", "choose_options", "prompt_key_data"]

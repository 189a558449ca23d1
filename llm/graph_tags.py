"""The LLM as a jittable tag source: Table 10 prompts tokenized on the device, no host callback.

The host path (`selector.TagSelector`) leaves the jitted rollout once per
decision period: it formats each prompt, tokenizes it, asks the backend and
comes back. `GraphTagSource` does the same work inside the rollout's XLA
program, for the embedded model's choice decoding:

1. *Prompt tokens on the device.* The state line of `prompt.format_state` is
   fixed text around five numbers. At build time the fixed pieces are
   tokenized once (`StateLineTokens`), each digit "0".."9" is one token, and
   the check `StateLineTokens.verify` proves on ~60 probe states
   (every digit count, both moving words, every digit in every slot) that the
   tokenizer really splits the line as fixed pieces + one token per digit and
   that the pieces follow the system prefix exactly as in the host path. A
   tokenizer that merges digits (e.g. llama-3's up-to-3-digit pre-tokenizer)
   fails this check with an error that points to the host path. On the device,
   the numbers are rounded exactly as Python formats them (half-up whole HP
   points; the distance's one decimal by exact round-half-even of the float32
   value, as `f"{x:.1f}"` does), rendered as digit tokens and left-packed into
   the same left-padded suffix the host path builds.
2. *Only what is needed is computed.* Ended episodes are skipped; identical
   prompts of a period (same rounded numbers) are computed once, as the host
   path does within one call; an answer cache carried across the rollout's
   periods (`tag_fn`, a `jaxarena.runner.CarryTagSource`) serves prompts met
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

`tag_fn` returns `(tags, aux)` (see `jaxarena.runner`): aux holds the option
logits, the renormalised probabilities, the previous tags and the period's
game time, so `decision_records` can write the same decision records as the
host path. The on-disk prompt cache (`cache.PromptCache`) is not read
here: every run computes its prompts. `cache_entries` turns them into cache
entries afterwards, so a later host-path run finds them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.names import BOT_MAX_HP, FALLBACK_REASONS, LLM_FEATURES, NPC_MAX_HP, NUM_NPCS, NUM_TAGS

from . import programs as P
from .cache import cache_key
from .choice import TAG_OPTIONS, option_token_ids, softmax
from .prompt import SYSTEM, build_prompt, format_state
from .types import Reply

#: Chunk sizes of the in-graph forward passes: big chunks while many prompts
#: remain, then small ones, so a period pads at most `chunk_sizes[-1] - 1` rows.
DEFAULT_CHUNK_SIZES = (32, 8)
#: The distance is rendered with up to this many integer digits (the arena's
#: diagonal is ~42 units); larger values are clamped, where the host path would print more.
DISTANCE_DIGITS = 3

#: Prompts the in-graph answer cache holds per rollout (a cell of the protocol meets ~1,000).
DEFAULT_CACHE_SIZE = 4096
_EMPTY = 0xFFFFFFFF  # an empty cache slot; `_pack_key` never produces it

HOST_PATH_HINT = "use the host path (--llm-path host, or TagSelector) for this model"


class UnsupportedTokenizer(ValueError):
    """The tokenizer does not split the state line into fixed pieces + one token per digit."""


# Sentinel numbers whose renderings cannot occur in the fixed text.
_SENTINELS = (1234567, 2345671, 3456712, 4567123.5)


def _digits(n: int) -> int:
    return len(str(int(n)))


@dataclasses.dataclass(frozen=True)
class _Segment:
    """A fixed piece (token ids per variant: one, or two indexed by bot_moving) or a number slot."""

    variants: tuple[tuple[int, ...], ...] = ()
    field: int = -1  # index into the rendered ints (bot, avg, alive, moving, dist_int, dist_tenth)
    max_digits: int = 0


class StateLineTokens:
    """The suffix token ids of a Table 10 prompt, built from the state on the device.

    Args:
      encode: the model tokenizer's `encode(text) -> ids` (special markers parsed).
      host_ids: `host_ids(system, user) -> (prefix_ids, suffix_ids)`, exactly
        how the host path splits a prompt (see `GraphTagSource`).
      system: the system prompt.
      bot_max_hp, npc_max_hp, num_npcs: the maxima written in the prompt.
      lead: token ids fed after the prompt before the options are read
        (`GGUFGenerator.option_tokens`; empty for SmolLM2).

    Raises `UnsupportedTokenizer` when the tokenizer does not split the line as
    fixed pieces + one token per digit.
    """

    def __init__(
        self,
        encode,
        host_ids,
        system: str = SYSTEM,
        *,
        bot_max_hp: float = BOT_MAX_HP,
        npc_max_hp: float = NPC_MAX_HP,
        num_npcs: int = NUM_NPCS,
        lead: Sequence[int] = (),
    ):
        self.limits = {"bot_max_hp": bot_max_hp, "npc_max_hp": npc_max_hp, "num_npcs": num_npcs}
        self.system = system
        self._host_ids = host_ids
        digit_ids = [encode(str(d)) for d in range(10)]
        if any(len(t) != 1 for t in digit_ids):
            raise UnsupportedTokenizer(f"a digit is not one token ({digit_ids}); {HOST_PATH_HINT}")
        self.digit_ids = np.asarray([t[0] for t in digit_ids], np.int32)
        b, a, n, d = _SENTINELS
        texts = [format_state(b, a, n, moving, d, **self.limits) for moving in (0.0, 1.0)]
        self.prefix_ids = list(host_ids(system, texts[0])[0])
        # The chat template's text after the user turn (end of turn, assistant opening).
        tail = self._tail(texts[0])
        max_digits = (
            _digits(round(bot_max_hp)),
            _digits(round(npc_max_hp)),
            _digits(num_npcs),
            0,
            DISTANCE_DIGITS,
            1,
        )
        fixed = [self._split(t) for t in texts]  # per moving variant: 6 fixed strings
        fields = (0, 1, 2, 4, 5)  # the number slot after each fixed piece (dist_int, then its tenth)
        segments = []
        for i in range(len(fixed[0])):
            pieces = [f[i] + (tail if i == len(fixed[0]) - 1 else "") for f in fixed]
            end = tuple(lead) if i == len(fixed[0]) - 1 else ()
            ids = tuple(tuple(encode(p)) + end for p in dict.fromkeys(pieces))
            segments.append(_Segment(variants=ids))
            if i < len(fields):
                segments.append(_Segment(field=fields[i], max_digits=max_digits[fields[i]]))
        self.segments = tuple(segments)
        self.length = sum(max(len(v) for v in s.variants) if s.variants else s.max_digits for s in segments)
        self.verify()

    def _tail(self, user: str) -> str:
        text = self._render(user)
        return text[text.index(user) + len(user) :]

    def _render(self, user: str) -> str:
        return self._host_ids.render(self.system, user)

    def _split(self, user: str) -> list[str]:
        """The fixed strings around the sentinel numbers: [F0, F1, F2, F3, F4 ("."), F5]."""
        b, a, n, d = (str(x) for x in _SENTINELS)
        d_int, d_frac = d.split(".")
        out, rest = [], user
        for s in (b, a, n, d_int, d_frac):
            i = rest.find(s)
            if i < 0:
                raise UnsupportedTokenizer(f"the state line {user!r} does not show {s}; {HOST_PATH_HINT}")
            out.append(rest[:i])
            rest = rest[i + len(s) :]
        return out + [rest]

    # ------------------------------------------------------------------ host
    def host_suffix(self, features: Sequence[float]) -> tuple[list[int], list[int]]:
        """(prefix ids, suffix ids) of the host path for one state (`build_prompt` + the tokenizer)."""
        return self._host_ids(self.system, build_prompt(*features, **self.limits).user)

    def verify(self, probes: Sequence[Sequence[float]] | None = None) -> None:
        """Raises `UnsupportedTokenizer` unless the device ids equal the host ids on every probe."""
        probes = np.asarray(probes if probes is not None else self.probe_states(), np.float32)
        tokens, n_pad = jax.jit(self.tokens)(jnp.asarray(probes))
        tokens, n_pad = np.asarray(tokens), np.asarray(n_pad)
        for row, feats in enumerate(probes):
            prefix, suffix = self.host_suffix(feats.tolist())
            mine = tokens[row, n_pad[row] :].tolist()
            if list(prefix) != list(self.prefix_ids) or mine != list(suffix):
                raise UnsupportedTokenizer(
                    f"this tokenizer does not split the Table 10 state line into fixed pieces + one token "
                    f"per digit (state {feats.tolist()}: host suffix {list(suffix)}, device {mine}); {HOST_PATH_HINT}"
                )

    def probe_states(self) -> np.ndarray:
        """States covering every digit count, both moving words and every digit in every slot."""
        bot_max, npc_max = self.limits["bot_max_hp"], self.limits["npc_max_hp"]
        rows = []
        for d in range(10):
            for moving in (0.0, 1.0):
                rows.append([d, d, d % (self.limits["num_npcs"] + 1), moving, d + d / 10])
                rows.append([d * 11, d * 11 % npc_max, 1, moving, d * 11 + 0.1 * ((d + 3) % 10)])
                rows.append([100 + d * 11, npc_max, 5, moving, 100 + d * 11 + 0.1 * d])
        rows += [[bot_max, npc_max, self.limits["num_npcs"], 1.0, 999.9], [0, 0, 0, 0, 0]]
        return np.asarray(rows, np.float32)

    # ---------------------------------------------------------------- device
    def render(self, features: jax.Array) -> jax.Array:
        """The prompt's numbers as int32 (N, 6): bot HP, avg NPC HP, alive, moving, distance (whole), its tenth.

        Rounded exactly as `format_state` writes them from the float32 values.
        """
        f = features.astype(jnp.float32)
        whole = jnp.stack([_half_up(f[:, 0]), _half_up(f[:, 1]), _half_up(f[:, 2])], axis=-1)
        caps = jnp.asarray([10**s.max_digits - 1 for s in self.segments if not s.variants][:3], jnp.int32)
        whole = jnp.minimum(whole, caps)
        moving = (f[:, 3] > 0.5).astype(jnp.int32)
        tenths = jnp.minimum(_tenths(jnp.maximum(f[:, 4], 0.0)), 10**DISTANCE_DIGITS * 10 - 1)
        return jnp.concatenate([whole, moving[:, None], (tenths // 10)[:, None], (tenths % 10)[:, None]], axis=-1)

    def tokens(self, features: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Left-padded suffix token ids (N, length) and pad counts (N,), as the host path packs them."""
        return self.tokens_of(self.render(features))

    def tokens_of(self, ints: jax.Array) -> tuple[jax.Array, jax.Array]:
        n = ints.shape[0]
        ids, valid = [], []
        for s in self.segments:
            if s.variants:
                width = max(len(v) for v in s.variants)
                table = np.zeros((len(s.variants), width), np.int32)
                ok = np.zeros((len(s.variants), width), bool)
                for i, v in enumerate(s.variants):
                    table[i, : len(v)], ok[i, : len(v)] = v, True
                pick = ints[:, 3] if len(s.variants) > 1 else jnp.zeros((n,), jnp.int32)
                ids.append(jnp.asarray(table)[pick])
                valid.append(jnp.asarray(ok)[pick])
            else:
                d, v = s.max_digits, ints[:, s.field]
                count = jnp.ones_like(v) + sum((v >= 10**k).astype(jnp.int32) for k in range(1, d))
                j = jnp.arange(d)[None, :]
                power = jnp.asarray([10**k for k in range(d)], jnp.int32)[jnp.clip(count[:, None] - 1 - j, 0, d - 1)]
                ids.append(jnp.asarray(self.digit_ids)[(v[:, None] // power) % 10])
                valid.append(j < count[:, None])
        ids, valid = jnp.concatenate(ids, axis=1), jnp.concatenate(valid, axis=1)
        # Left-pack: the padding moves to the front, the real tokens keep their order.
        order = jnp.argsort(valid.astype(jnp.int32), axis=1, stable=True)
        return jnp.take_along_axis(ids, order, axis=1), self.length - valid.sum(axis=1).astype(jnp.int32)


def _pack_key(ints: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A prompt's numbers in one uint32 (bot 9 bits, avg 6, alive 3, moving 1, tenths 13), and whether they fit."""
    bot, avg, alive, moving, whole, tenth = (ints[:, i].astype(jnp.uint32) for i in range(6))
    tenths = whole * 10 + tenth
    fits = (bot < 512) & (avg < 64) & (alive < 8) & (tenths < 8191)
    packed = (bot << 23) | (avg << 17) | (alive << 14) | (moving << 13) | jnp.minimum(tenths, 8190)
    return packed, fits


def _half_up(x: jax.Array) -> jax.Array:
    """max(0, floor(x + 0.5)) of float32 values, computed exactly (as float64 would)."""
    fl = jnp.floor(x)
    return jnp.maximum(fl.astype(jnp.int32) + (x - fl >= 0.5).astype(jnp.int32), 0)


def _tenths(x: jax.Array) -> jax.Array:
    """round-half-even(10 * x) of non-negative float32 values, exactly, in integers.

    `f"{x:.1f}"` rounds the exact binary value; 10 * x in float32 is not
    exact (0.25 -> "0.2", 0.35f -> "0.3"), so x = m * 2**e is expanded and
    10 * m shifted right by -e with the remainder deciding the rounding.
    """
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    exp = ((bits >> 23) & 0xFF).astype(jnp.int32)
    mant = bits & 0x7FFFFF
    m = jnp.where(exp == 0, mant, mant | 0x800000)
    e = jnp.where(exp == 0, -149, exp - 150)  # x = m * 2**e
    t = m * jnp.uint32(10)  # < 2**28
    shift = jnp.clip(-e, 1, 31).astype(jnp.uint32)
    q = t >> shift
    r = t & ((jnp.uint32(1) << shift) - 1)
    half = jnp.uint32(1) << (shift - 1)
    rounded = q + ((r > half) | ((r == half) & ((q & 1) == 1))).astype(jnp.uint32)
    # e >= 0: x is a whole number; -e > 31: x < 2**-8, so 10 x < 0.05 rounds to 0.
    up = jnp.clip(e, 0, 3).astype(jnp.uint32)
    out = jnp.where(e >= 0, t << up, jnp.where(-e > 31, 0, rounded))
    return out.astype(jnp.int32)


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
        keep = (jnp.cumsum(ps) - ps < top_p).at[0].set(True)  # the best option always stays
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
            _HostIds(generator),
            system,
            bot_max_hp=bot_max_hp,
            npc_max_hp=npc_max_hp,
            num_npcs=num_npcs,
            lead=_option_tokens(generator)[0],
        )
        self.option_ids = _option_tokens(generator)[1]
        prefix = generator._prefix(tuple(self.lines.prefix_ids))
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
        """The tag source for `jaxarena.runner`: -> (tags, aux) each period.

        With `cache` (default) a `CarryTagSource` whose state is the device
        arrays and an answer cache that keeps every answer of the rollout (up
        to `cache_size` prompts), so a prompt met again in a later period is
        not recomputed (its answer is the same: the draw is keyed by the
        prompt). Pass `initial_state()` as `run(..., tag_state=...)` to give
        the weights to the compiled program as an argument; without it they
        are closed over and baked in as constants (compiles ~1.7x slower,
        measured). With `cache=False`, a plain `fn(features, prev_tags, done,
        time_s, key)` closing over the weights.
        """
        from jaxarena.runner import CarryTagSource

        if not cache:
            return partial(self.apply, self.arrays)
        return CarryTagSource(init=lambda n: self.initial_state(), fn=self._carry_step)

    def initial_state(self) -> dict:
        """The `CarryTagSource` state at a rollout's start: the device arrays and an empty answer cache."""
        return {"arrays": self.arrays, "cache": self.init_cache()}

    def _carry_step(self, state, features, prev_tags, done, time_s, key):
        tags, aux, cache = self.apply_cached(state["arrays"], state["cache"], features, prev_tags, done, time_s, key)
        return tags, aux, {"arrays": state["arrays"], "cache": cache}

    def choose(self, features) -> tuple[np.ndarray, dict]:
        """Tags and aux for a batch of states, all active (tests and benchmarks)."""
        if not hasattr(self, "_jit_apply"):
            self._jit_apply = jax.jit(self.apply)
        f = jnp.asarray(features, jnp.float32)
        n = f.shape[0]
        tags, aux = self._jit_apply(self.arrays, f, jnp.zeros((n,), jnp.int32), jnp.zeros((n,), bool), 0.0)
        return np.asarray(tags), jax.tree.map(np.asarray, aux)

    # ---------------------------------------------------------------- host
    def decision_records(self, result, context: dict | None = None, decode: str = "choice") -> list[dict]:
        """The decision log lines of a rollout, with the host path's fields (see `selector.TagSelector`).

        `result` is a `RolloutResult` of a rollout that used `tag_fn`. The
        reply is the option's text, `probs` the renormalised option
        distribution (from the same float32 logits, as the host path computes
        it), `prompt_hash` the host path's cache key of the prompt; there is
        no per-call latency (0.0) and no prompt cache (`cache_hit` false).
        """
        aux = jax.tree.map(np.asarray, result.decision_aux)
        name, model = self.identity["backend"], self.identity["model"]
        context = dict(context or {})
        lines, seen = [], {}
        for p, e, feats, prompt, key, tag, probs in self._decisions(result, decode):
            shared = prompt in seen.setdefault(p, set())
            seen[p].add(prompt)
            lines.append(
                {
                    **context,
                    "call": p,
                    "episode": e,
                    "time_s": round(float(aux["time_s"][p]), 3),
                    "state": {n: round(float(v), 4) for n, v in zip(LLM_FEATURES, feats, strict=True)},
                    "prompt_hash": key[:16],
                    "prev_tag": int(aux["prev_tags"][p, e]),
                    "reply": TAG_OPTIONS[tag],
                    "decode": decode,
                    "probs": [round(float(x), 6) for x in probs],
                    "error": None,
                    "tag": tag,
                    "fallback": None,
                    "latency_s": 0.0,
                    "cache_hit": False,
                    "shared": shared,
                    "backend": name,
                    "model": model,
                }
            )
        return lines

    def _decisions(self, result, decode: str):
        """Each decision actually made, in (period, episode) order: (p, e, features, prompt, key, tag, probs)."""
        feats = np.asarray(result.decision_features).astype(np.float64)
        logits = np.asarray(result.decision_aux["logits"])
        tags = np.asarray(result.decision_tags)
        name, model, options = self.identity["backend"], self.identity["model"], self.identity["options"]
        for p, e in zip(*np.nonzero(np.asarray(result.decision_active)), strict=True):
            prompt = build_prompt(*feats[p, e], **self.lines.limits)
            key = cache_key(name, model, prompt, options, decode)
            yield int(p), int(e), feats[p, e], prompt, key, int(tags[p, e]), softmax(logits[p, e])

    def cache_entries(self, result, decode: str = "choice") -> list[tuple[str, Reply, dict]]:
        """The rollout's distinct prompts as prompt-cache entries `(key, reply, about)`.

        The graph path reads no cache, but filling one means a later run on
        the host path (a warm re-run, `--llm-path host`) finds these replies
        instead of recomputing them.
        """
        name, model = self.identity["backend"], self.identity["model"]
        entries = {}
        for _, _, _, prompt, key, tag, probs in self._decisions(result, decode):
            reply = Reply(TAG_OPTIONS[tag], 0.0, None, tuple(float(x) for x in probs))
            entries[key] = (key, reply, {"backend": name, "model": model, "user": prompt.user})
        return list(entries.values())

    def counters(self, result) -> dict:
        """The cell's LLM counters, with the host path's keys (`selector.SelectorStats.as_dict`)."""
        active = np.asarray(result.decision_active)
        tags = np.asarray(result.decision_tags)[active]
        computed = int(np.asarray(result.decision_aux["computed"]).sum())
        feats = np.asarray(result.decision_features).astype(np.float64)
        unique = sum(
            len({build_prompt(*feats[p, e], **self.lines.limits) for e in np.flatnonzero(active[p])})
            for p in range(active.shape[0])
        )
        return {
            "calls": int(active.shape[0]),
            "decisions": int(active.sum()),
            "unique_prompts": unique,
            "cache_hits": unique - computed,
            "llm_requests": computed,
            "errors": 0,
            "fallbacks": {r: 0 for r in FALLBACK_REASONS},
            "tags": np.bincount(tags, minlength=NUM_TAGS).astype(int).tolist(),
            "llm_seconds": 0.0,
            "host_seconds": 0.0,
            "fallback_total": 0,
        }


class _HostIds:
    """How the host path tokenizes a prompt and splits off the shared prefix (`generate.SmolLM2Generator`)."""

    def __init__(self, generator):
        self.generator = generator

    def render(self, system: str, user: str) -> str:
        render = getattr(self.generator.tokenizer, "render", None)
        if render is not None:
            return render(system, user)
        from .tokenizer import chatml

        return chatml(system, user)

    def __call__(self, system: str, user: str) -> tuple[list[int], list[int]]:
        # The reply's lead tokens (if any) are fed after the prompt before the options are read.
        ids = self.generator.tokenizer.encode(self.render(system, user)) + list(_option_tokens(self.generator)[0])
        k = self.generator.split_prefix(system, ids)
        return ids[:k], ids[k:]


def _option_tokens(generator) -> tuple[tuple[int, ...], np.ndarray]:
    """(lead, option ids) as the host path's choice decoding uses them."""
    option_tokens = getattr(generator, "option_tokens", None)
    if option_tokens is not None:
        return option_tokens(TAG_OPTIONS)
    return (), option_token_ids(generator.tokenizer.encode, TAG_OPTIONS)


def _default_model() -> str:
    from .backends.embedded import MODEL_NAME

    return MODEL_NAME


def _host_hash(ids: Sequence[int]) -> int:
    h = 0x811C9DC5
    for t in ids:
        h = ((h ^ (int(t) & 0xFFFFFFFF)) * 0x01000193) & 0xFFFFFFFF
    return h


__all__ = [
    "DEFAULT_CHUNK_SIZES",
    "GraphTagSource",
    "StateLineTokens",
    "UnsupportedTokenizer",
    "choose_options",
    "prompt_key_data",
]

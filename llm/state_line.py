"""The Table 10 state line as token ids built on the device, proven equal to the host path's.

The state line of `prompt.format_state` is fixed text around five numbers.
At build time the fixed pieces are tokenized once (`StateLineTokens`), each
digit "0".."9" is one token, and the check `StateLineTokens.verify` proves on
~60 probe states (every digit count, both moving words, every digit in every
slot) that the tokenizer really splits the line as fixed pieces + one token
per digit and that the pieces follow the system prefix exactly as in the host
path. A tokenizer that merges digits (e.g. llama-3's up-to-3-digit
pre-tokenizer) fails this check with an error that points to the host path.
On the device, the numbers are rounded exactly as Python formats them (half-up
whole HP points; the distance's one decimal by exact round-half-even of the
float32 value, as `f"{x:.1f}"` does), rendered as digit tokens and left-packed
into the same left-padded suffix the host path builds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.names import BOT_MAX_HP, NPC_MAX_HP, NUM_NPCS

from .choice import TAG_OPTIONS, option_token_ids
from .prompt import SYSTEM, build_prompt, format_state

#: The distance is rendered with up to this many integer digits (the arena's
#: diagonal is ~42 units); larger values are clamped, where the host path would print more.
DISTANCE_DIGITS = 3

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


class HostIds:
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

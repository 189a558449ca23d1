"""Constrained choice decoding: the model picks one of a few option tokens, with their probabilities.

Free generation asks the model for up to three tokens and parses the first
character (Table 10); a small model answers with words ("Enemy bot") and
every decision becomes a fallback. Choice decoding keeps the paper's prompt
and reads the model's next-token distribution at the start of the reply,
restricted to the option tokens ("0".."3"):

- `probs` is that distribution renormalised over the options, the model's
  own preference (what a bias study reports);
- the chosen option is drawn from it with Table 10's temperature and top_p
  (nucleus over the options, in Ollama's order: temperature, then top_p),
  seeded per prompt, so the same prompt always gets the same choice; at
  temperature 0 it is the argmax.

The option token ids come from the model's own tokenizer (each option must
be one token), never from a hard-coded table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from jaxarena.names import NUM_TAGS

#: The tag options as the prompt names them: the digits "0".."3".
TAG_OPTIONS: tuple[str, ...] = tuple(str(i) for i in range(NUM_TAGS))

DECODE_MODES = ("choice", "free")

#: Ollama's structured-output `format` for a choice: a JSON integer among the tag codes
#: (Ollama turns the JSON schema into a llama.cpp grammar, so the reply can only be one of them).
TAG_FORMAT = {"type": "integer", "enum": list(range(NUM_TAGS))}


def check_decode(decode: str) -> str:
    if decode not in DECODE_MODES:
        raise ValueError(f"unknown decode mode {decode!r}; choose from {', '.join(DECODE_MODES)}")
    return decode


def option_token_ids(encode: Callable[[str], list[int]], options: Sequence[str] = TAG_OPTIONS) -> np.ndarray:
    """The one token id of each option string, from the tokenizer's `encode`.

    Raises ValueError if an option is not exactly one token, or two options share one.
    """
    ids = []
    for option in options:
        tokens = encode(option)
        if len(tokens) != 1:
            raise ValueError(f"option {option!r} is {len(tokens)} tokens for this tokenizer ({tokens}); need exactly 1")
        ids.append(tokens[0])
    if len(set(ids)) != len(ids):
        raise ValueError(f"options {list(options)} do not map to distinct tokens: {ids}")
    return np.asarray(ids, np.int32)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, np.float64)
    z = np.exp(z - z.max())
    return z / z.sum()


def choose_option(logits: np.ndarray, temperature: float, top_p: float, key_data: np.ndarray) -> int:
    """Index of the chosen option from its logits, seeded by `key_data` (uint32 words of the prompt's key)."""
    logits = np.asarray(logits, np.float64)
    if temperature <= 0:
        return int(np.argmax(logits))
    p = softmax(logits / temperature)
    order = np.argsort(-p, kind="stable")
    before = np.cumsum(p[order]) - p[order]  # mass of strictly better options
    keep = before < top_p
    keep[0] = True  # the best option always stays (top_p <= 0, or NaN logits)
    kept = order[keep]
    q = p[kept] / p[kept].sum()
    u = np.random.default_rng(np.asarray(key_data, np.uint32)).random()
    return int(kept[min(int(np.searchsorted(np.cumsum(q), u, side="right")), len(kept) - 1)])


def entropy_bits(probs: np.ndarray) -> np.ndarray:
    """Shannon entropy in bits of distributions along the last axis (2 bits for 4 equal options)."""
    p = np.asarray(probs, np.float64)
    return -np.sum(np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0), axis=-1)

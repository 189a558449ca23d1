"""The generator's batch shapes: prompts padded to a few bucket sizes, each row with its own sampling key.

Rounding every batch and suffix up to a bucket (`GGUFGenerator`'s
`batch_buckets`, `suffix_buckets`) means a run compiles a handful of programs
and then never again. A row's key is a hash of its prompt, not its place in
the batch, so a prompt gets the same reply whatever batch it is in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


def bucket(n: int, buckets: Sequence[int]) -> int | None:
    """The smallest bucket that holds `n`, or None when none does."""
    for b in buckets:
        if n <= b:
            return b
    return None


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


def pack_suffixes(
    chunk, prompts, batch_buckets: Sequence[int], suffix_buckets: Sequence[int], seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A chunk's suffixes left-padded into (B, S) bucket shapes, with per-row pad counts and keys.

    `chunk` holds (prompt index, suffix token ids) pairs; `prompts` the (system, user) pairs they index.
    """
    B = bucket(len(chunk), batch_buckets)
    S = bucket(max(len(s) for _, s in chunk), suffix_buckets)
    tokens = np.zeros((B, S), np.int32)
    n_pad = np.full((B,), S - 1, np.int32)  # filler rows: one token, ignored
    key_data = np.zeros((B, 2), np.uint32)
    for r, (i, suffix) in enumerate(chunk):
        tokens[r, S - len(suffix) :] = suffix
        n_pad[r] = S - len(suffix)
        key_data[r] = prompt_rng_key(prompts[i][0], prompts[i][1], seed)
    return tokens, n_pad, key_data

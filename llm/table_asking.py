"""Putting a strategy table's prompts to an LLM: replies to probabilities, in chunks, and the prompts' hash.

`strategy_table.build_table` asks every cell through one `Asker`; a test can
ask a few cells with its own. `prompts_sha256` tells `load_table` whether a
table was built from today's prompts.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

import numpy as np

from jaxarena.names import NUM_TAGS

from .candidates import N_CANDIDATES, NUM_CANDIDATE_CELLS, candidate_prompt, dedup, iterative_prompt
from .choice import TAG_OPTIONS
from .deduction import NUM_DEDUCTION_CELLS, deduction_prompt
from .types import Backend, Prompt, Reply

#: Prompts per backend call while building (progress is reported between calls).
BUILD_CHUNK = 128


def reply_probs(reply: Reply, n: int) -> tuple[np.ndarray, str | None]:
    """A reply's option probabilities, and why they had to be made up (None when the model gave them)."""
    if reply.error is None and reply.probs is not None and len(reply.probs) == n:
        p = np.asarray(reply.probs, np.float64)
        if np.all(np.isfinite(p)) and p.sum() > 0:
            return p / p.sum(), None
    text = (reply.text or "").strip()
    if reply.error is None and text in TAG_OPTIONS[:n]:
        return np.eye(n)[TAG_OPTIONS.index(text)], "no_probs"
    return np.full(n, 1.0 / n), "error"


class Asker:
    """Puts prompts to a backend in chunks; keeps the progress bar, the counts and the prompt hash.

    `build_table` uses one for the whole build; a test can ask a few cells with its own.
    """

    def __init__(self, backend: Backend, total: int, progress: bool):
        self.backend = backend
        self.hash = hashlib.sha256()
        self.no_probs: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.bar = None
        if progress:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="prompt", desc="strategy table")

    def _replies(self, prompts: list[Prompt]) -> list[Reply]:
        if hasattr(self.backend, "generate_sync"):
            return self.backend.generate_sync(prompts)
        return asyncio.run(self.backend.generate(prompts))

    def ask(self, part: str, prompts: Sequence[Prompt]) -> np.ndarray:
        """(len(prompts), 4) float64 probabilities; never raises for a bad reply."""
        out = np.zeros((len(prompts), NUM_TAGS))
        for start in range(0, len(prompts), BUILD_CHUNK):
            chunk = list(prompts[start : start + BUILD_CHUNK])
            try:
                replies = self._replies(chunk)
            except Exception as exc:  # noqa: BLE001 - a build records failures, it never stops midway
                replies = [Reply("", 0.0, f"{type(exc).__name__}: {exc}") for _ in chunk]
            for i, (prompt, reply) in enumerate(zip(chunk, replies, strict=True)):
                _hash_prompt(self.hash, prompt)
                out[start + i], why = reply_probs(reply, NUM_TAGS)
                if why is not None:
                    counts = self.no_probs if why == "no_probs" else self.errors
                    counts[part] = counts.get(part, 0) + 1
            if self.bar is not None:
                self.bar.update(len(chunk))
        return out

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _hash_prompt(h, prompt: Prompt) -> None:
    h.update(prompt.system.encode())
    h.update(b"\0")
    h.update(prompt.user.encode())
    h.update(b"\n")


def deduction_probs_for(asker: Asker, cells: Sequence[int]) -> np.ndarray:
    return asker.ask("deduction", [deduction_prompt(c) for c in cells])


def vanilla_probs_for(asker: Asker, cells: Sequence[int]) -> np.ndarray:
    return asker.ask("vanilla", [candidate_prompt(c) for c in cells])


def iterative_chains_for(
    asker: Asker, cells: Sequence[int], first_probs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs the iterative chains of `cells` (tags, probs, repeats); `first_probs` are their vanilla replies.

    Prompt 0 of a chain is the vanilla prompt, so its reply is reused. Round k
    asks every cell's prompt k in one pass, since it needs round k-1's answers.
    """
    replies = [[p] for p in first_probs]
    for _ in range(N_CANDIDATES - 1):
        taken = [dedup([int(np.argmax(p)) for p in r], r)[0] for r in replies]
        round_probs = asker.ask("iterative", [iterative_prompt(c, t) for c, t in zip(cells, taken, strict=True)])
        for r, p in zip(replies, round_probs, strict=True):
            r.append(p)
    chains = [dedup([int(np.argmax(p)) for p in r], r) for r in replies]
    tags = np.asarray([c[0] for c in chains], np.int32).reshape(len(cells), N_CANDIDATES)
    probs = np.asarray([c[1] for c in chains], np.float32).reshape(len(cells), N_CANDIDATES)
    repeats = np.asarray([c[2] for c in chains], np.int32)
    return tags, probs, repeats


def backend_metadata(backend: Backend) -> dict:
    options = tuple(sorted((str(k), float(v)) for k, v in dict(getattr(backend, "options", {})).items()))
    return {
        "backend": str(getattr(backend, "name", type(backend).__name__)),
        "model": str(getattr(backend, "model", "")),
        "decode": str(getattr(backend, "decode", "")),
        "options": options,
    }


def table_prompts(iterative_tags) -> list[Prompt]:
    """Every prompt a table's build asked, in order; the iterative ones follow from its `iterative_tags`.

    It takes the tags, not the `StrategyTable`, so asking stays below the table that it builds."""
    prompts = [deduction_prompt(c) for c in range(NUM_DEDUCTION_CELLS)]
    prompts += [candidate_prompt(c) for c in range(NUM_CANDIDATE_CELLS)]
    tags = np.asarray(iterative_tags)
    for k in range(1, N_CANDIDATES):
        prompts += [iterative_prompt(c, tags[c, :k].tolist()) for c in range(NUM_CANDIDATE_CELLS)]
    return prompts


def prompts_sha256(iterative_tags) -> str:
    """sha256 of every prompt a table with these `iterative_tags` was built from (`table_prompts`)."""
    h = hashlib.sha256()
    for prompt in table_prompts(iterative_tags):
        _hash_prompt(h, prompt)
    return h.hexdigest()

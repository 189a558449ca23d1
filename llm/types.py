"""The two small types every LLM backend speaks: a prompt in, a reply out."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A chat prompt split so that the fixed part is a shared prefix.

    `system` holds the role and the action instructions (identical for every
    decision); `user` holds the state line, which is the only part that varies.
    Both backends render the same two messages, so they see the same words.
    """

    system: str
    user: str


@dataclasses.dataclass(frozen=True)
class Reply:
    """What a backend returned for one prompt.

    `text` is the raw generated text ("" on error), `latency_s` the wall time
    spent on this prompt, and `error` a short reason when no text came back
    (timeout, HTTP status, connection refused, ...). `probs` is set by choice
    decoding where the backend can see the model's distribution: the
    renormalised probabilities of the options ("0".."3"), else None.
    """

    text: str
    latency_s: float
    error: str | None = None
    probs: tuple[float, ...] | None = None


class Backend(Protocol):
    """Anything that turns prompts into replies, concurrently.

    Implementations never raise for a per-prompt failure: they return a Reply
    with `error` set, so one bad request can never crash a run.
    """

    name: str
    model: str
    options: dict
    decode: str  # "choice" (constrained to the options) or "free" (Table 10's generation)

    async def generate(self, prompts: Sequence[Prompt]) -> list[Reply]: ...

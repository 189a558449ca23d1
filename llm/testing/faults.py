"""The test server's faults: what can go wrong with a request, and how often.

`FaultConfig` holds the settings (flags at start-up, or `POST /_faults` at run
time); `draw_fault` draws one request's fault from the seeded stream.
"""

from __future__ import annotations

import dataclasses
import random

FAULT_KINDS: tuple[str, ...] = ("timeout", "http_500", "drop", "garbage", "empty", "out_of_range")

#: Replies for the "garbage" fault. Each starts with a non-digit, non-space
#: character, so the parser must classify every one as "non_numeric".
GARBAGE_REPLIES: tuple[str, ...] = (
    "Surround them!",
    "I think 2",
    "The best tactic is Flank.",
    "?",
    "**2**",
    "Tactic: 1",
    "nan",
)
#: Replies for the "empty" fault: nothing, or only whitespace.
EMPTY_REPLIES: tuple[str, ...] = ("", " ", "\n", "  \n\t")


@dataclasses.dataclass
class FaultConfig:
    """What the server does to each generation request.

    - delay_s: fixed processing time per request (inside a slot)
    - slots: requests processed at once; the rest queue, as with OLLAMA_NUM_PARALLEL
    - p_timeout: probability the request hangs for `hang_s` (longer than the
      client's timeout) and is then closed unanswered
    - p_http_500: probability of an HTTP 500 with an Ollama-style {"error": ...}
    - p_drop: probability the connection is closed with no response
    - p_garbage: probability of a non-numeric reply ("Surround them!", ...)
    - p_empty: probability of an empty (or blank) reply
    - p_out_of_range: probability of a digit 4-9
    - seed: faults are drawn from one seeded stream in arrival order, so the
      *counts* over K requests are reproducible
    """

    delay_s: float = 0.0
    slots: int = 4
    p_timeout: float = 0.0
    p_http_500: float = 0.0
    p_drop: float = 0.0
    p_garbage: float = 0.0
    p_empty: float = 0.0
    p_out_of_range: float = 0.0
    hang_s: float = 60.0
    seed: int = 0

    def probabilities(self) -> list[tuple[str, float]]:
        return [
            ("timeout", self.p_timeout),
            ("http_500", self.p_http_500),
            ("drop", self.p_drop),
            ("garbage", self.p_garbage),
            ("empty", self.p_empty),
            ("out_of_range", self.p_out_of_range),
        ]

    def validate(self) -> None:
        total = sum(p for _, p in self.probabilities())
        if any(p < 0 for _, p in self.probabilities()) or total > 1.0 + 1e-9:
            raise ValueError(f"fault probabilities must be >= 0 and sum to <= 1, got {total}")
        if self.slots < 1:
            raise ValueError("slots must be >= 1")


def draw_fault(config: FaultConfig, rng: random.Random) -> tuple[str | None, str]:
    """One request's fault kind (None for none) and, for a bad-reply fault, its text.

    Exactly two draws per request, whatever the outcome, keep the stream
    aligned, so the counts depend only on the number of requests.
    """
    u, v = rng.random(), rng.random()
    kind, edge = None, 0.0
    for name, p in config.probabilities():
        edge += p
        if u < edge:
            kind = name
            break
    text = ""
    if kind == "garbage":
        text = GARBAGE_REPLIES[int(v * len(GARBAGE_REPLIES))]
    elif kind == "empty":
        text = EMPTY_REPLIES[int(v * len(EMPTY_REPLIES))]
    elif kind == "out_of_range":
        text = str(4 + int(v * 6))
    return kind, text

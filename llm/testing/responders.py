"""What the test server answers with, when no fault is injected.

A responder maps a prompt, and the integer choices a request's `format`
allows (None when unconstrained), to reply text (`make_responder` builds one
from the server's `--responder` value):
  - "embedded" (default): the embedded JAX model (`backends.embedded`), so the
    replies are a real model's words; concurrent requests are micro-batched.
    Under a `format` it is constrained as Ollama's grammar constrains a model:
    choice decoding over the allowed values (`jaxarena.llm.choice`).
  - "hash-digit": a deterministic digit 0-3 (or one of the allowed values)
    from a hash of the state line; fast, for tests and benchmarks that count
    faults rather than judge answers.
  - "fixed:TEXT": always TEXT, format or not (for tests of what a client does
    with a reply it did not ask for).
  - "coder-fixture": fixed answers by the role the system prompt names
    (`jaxarena.coder.prompts`): a plan, programs cycling by candidate number
    through a good one, one the sandbox refuses and a reply without code, and
    a critic that asks for new tactics in odd rounds. A test of the coder
    loop's pipeline only: its scores mean nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import queue
import re
import threading
import time
from collections.abc import Callable

from jaxarena.names import BOT_MAX_HP, NPC_MAX_HP, NUM_NPCS, NUM_TAGS

from ..types import Prompt

Responder = Callable[[Prompt, "tuple[int, ...] | None"], str]

RESPONDERS: tuple[str, ...] = ("embedded", "hash-digit", "coder-fixture", "fixed:TEXT")


def hash_digit(prompt: Prompt, choices: tuple[int, ...] | None = None) -> str:
    """A deterministic tag for a state line: the same prompt always gets the same digit (one of `choices`)."""
    byte = hashlib.sha256(prompt.user.encode()).digest()[0]
    return str(byte % NUM_TAGS) if choices is None else str(choices[byte % len(choices)])


class EmbeddedResponder:
    """Answers with the embedded JAX model, batching requests that arrive together.

    HTTP handler threads each submit one prompt; a single worker thread, which
    owns the model and one event loop, takes whatever is queued (up to `max_batch`)
    and generates for all of it in one batched call.
    """

    def __init__(self, max_batch: int):
        from ..backends.embedded import EmbeddedBackend  # heavy import: only when used

        self.backend = EmbeddedBackend(decode="free", max_batch=max_batch)
        self.model = self.backend.model
        self.max_batch = max_batch
        self._queue: queue.Queue = queue.Queue()
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._work, name="embedded-responder", daemon=True).start()

    def _work(self) -> None:
        asyncio.set_event_loop(self._loop)
        while True:
            batch = [self._queue.get()]
            # A short wait lets requests that arrive together share one batch.
            deadline = time.monotonic() + 0.005
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            # Requests under the same constraint share one batched call.
            by_choices: dict = {}
            for item in batch:
                by_choices.setdefault(item[1], []).append(item)
            for choices, items in by_choices.items():
                try:
                    results = self._answer([p for p, _, _ in items], choices)
                except Exception as exc:  # a model failure must answer, not hang, the requests
                    results = [("", f"{type(exc).__name__}: {exc}")] * len(items)
                for (_, _, box), result in zip(items, results, strict=True):
                    box.put(result)

    def _answer(self, prompts: list[Prompt], choices: tuple[int, ...] | None) -> list[tuple[str, str | None]]:
        if choices is None:
            replies = self._loop.run_until_complete(self.backend.generate(prompts))
            if len(replies) != len(prompts):
                raise RuntimeError(f"backend returned {len(replies)} replies for {len(prompts)} prompts")
            return [(r.text, r.error) for r in replies]
        options = self.backend.options
        gens = self.backend.load().choose(
            [(p.system, p.user) for p in prompts],
            tuple(str(c) for c in choices),
            temperature=options["temperature"],
            top_p=options["top_p"],
        )
        return [(g.text, g.error) for g in gens]

    def __call__(self, prompt: Prompt, choices: tuple[int, ...] | None = None) -> str:
        box: queue.Queue = queue.Queue(maxsize=1)
        self._queue.put((prompt, choices, box))
        text, error = box.get(timeout=600)
        if error is not None:
            raise RuntimeError(error)
        return text


FIXTURE_PLAN = """### Tactic 1: Focus Fire
**Condition to use:** always.
**Tactic skeleton:** every NPC walks at the bot and strikes whenever its melee lands.
### Tactic 2: Hit and Run
**Condition to use:** when an NPC is hurt.
**Tactic skeleton:** step back after a strike, then close in again."""

#: What the coder fixture answers, cycling by candidate number: a good program, a refused one, no code.
FIXTURE_CODER_REPLIES = (
    "Here is the focus-fire squad:\n```python\ndef policy(obs):\n"
    '    """Strike when it lands, else close in."""\n'
    "    if obs.bot.can_attack:\n        return MELEE\n    return MOVE_TO_BOT\n```\n",
    "```python\ndef policy(obs):\n    while obs.bot.hp > 0:\n        return MELEE\n    return RETREAT\n```\n",
    "I would walk at the bot and strike it, but I will not write code for that.",
)


def coder_fixture(prompt: Prompt, choices: tuple[int, ...] | None = None) -> str:
    """The coder loop's fixed answers by role (see the module docstring)."""
    role = re.match(r"Role: (\w+)", prompt.system)
    role = role.group(1) if role else ""
    if role == "planner":
        return FIXTURE_PLAN
    if role == "coder":
        number = re.search(r"candidate (\d+) of", prompt.user)
        return FIXTURE_CODER_REPLIES[(int(number.group(1)) - 1 if number else 0) % len(FIXTURE_CODER_REPLIES)]
    if role == "critic":
        round_number = re.search(r"Round (\d+)", prompt.user)
        odd = round_number is not None and int(round_number.group(1)) % 2 == 1
        return "The squad never kites, so it cannot catch a fleeing bot. " + (
            "[Change Tactic]" if odd else "[Improve Tactic]"
        )
    return "coder-fixture: no role in the system prompt"


def make_responder(spec: str, max_batch: int) -> tuple[Responder, str]:
    """Returns (responder, default model name) for a --responder value."""
    if spec == "embedded":
        responder = EmbeddedResponder(max_batch)
        # Compile for the real prompt's shapes before announcing "ready".
        from ..prompt import build_prompt

        responder(build_prompt(BOT_MAX_HP, NPC_MAX_HP, NUM_NPCS, 0, 20.0))
        return responder, responder.model
    if spec == "hash-digit":
        return hash_digit, "test-digit"
    if spec == "coder-fixture":
        return coder_fixture, "test-coder"
    if spec.startswith("fixed:"):
        text = spec[len("fixed:") :]
        return (lambda prompt, choices=None: text), "test-fixed"
    raise ValueError(f"unknown responder {spec!r}; use {', '.join(RESPONDERS[:-1])} or {RESPONDERS[-1]}")

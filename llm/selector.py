"""The batched LLM tag selector, called from inside a jitted rollout.

Once per 5 s decision period the rollout hands the whole batch of episodes to
`TagSelector.select` through `jax.experimental.io_callback` (see
`TagSelector.jax_fn`). For one call it:

1. skips finished episodes (they keep their tag);
2. builds one Table 10 prompt per remaining episode;
3. deduplicates identical prompts, so each distinct state line is asked once;
4. answers what it can from the prompt cache, keyed by
   (backend, model, prompt, options), in memory and optionally on disk, so a
   re-run with a warm cache makes no LLM calls at all;
5. sends the rest to the backend concurrently, on one asyncio event loop that
   lives on a background thread for the whole run (not one loop per call);
6. parses each reply, keeping the previous tag on any fallback;
7. appends one JSON line per decision to the decision log and updates the counters.

Nothing here raises for a bad reply or a dead server: those are fallbacks,
logged and counted, as in the paper.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import numpy as np

from jaxarena.names import BOT_MAX_HP, FALLBACK_REASONS, LLM_FEATURES, NPC_MAX_HP, NUM_NPCS, NUM_TAGS

from .backends import make_backend
from .cache import PromptCache, cache_key
from .prompt import build_prompt, parse_tag
from .types import Backend, Prompt, Reply


class EventLoopThread:
    """One asyncio event loop running on a daemon thread for the whole run.

    Backends keep connection pools and semaphores that belong to a loop, so all
    calls of a run share this one loop; callers on other threads (XLA's callback
    thread) submit coroutines and wait for the result with a bound.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="llm-event-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Any, timeout_s: float) -> Any:
        """Runs `coro` on the loop; cancels it and raises TimeoutError after `timeout_s`."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout_s:g} s") from None

    def close(self) -> None:
        """Cancels what is still pending (e.g. a batch abandoned at its timeout), then stops."""
        if self.loop.is_closed():
            return

        async def cancel_pending() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=5) if tasks else None

        try:
            asyncio.run_coroutine_threadsafe(cancel_pending(), self.loop).result(timeout=10)
        except Exception:  # noqa: BLE001 - shutting down is best effort
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


@dataclasses.dataclass
class SelectorStats:
    """Running totals for progress displays and `summary.json`.

    - calls: selector invocations (decision periods); decisions: episodes decided
    - unique_prompts: distinct prompts over all calls (summed per call)
    - cache_hits: distinct prompts answered from the cache; llm_requests: sent to the backend
    - errors: requests the backend failed (each failed request's decisions,
      shared ones included, are counted in fallbacks["error"])
    - fallbacks: decisions that kept the previous tag, by reason
    - tags: decisions per resulting tag; llm_seconds: wall time waiting on the
      backend; host_seconds: total wall time inside `select`
    """

    calls: int = 0
    decisions: int = 0
    unique_prompts: int = 0
    cache_hits: int = 0
    llm_requests: int = 0
    errors: int = 0
    fallbacks: dict[str, int] = dataclasses.field(default_factory=lambda: {r: 0 for r in FALLBACK_REASONS})
    tags: list[int] = dataclasses.field(default_factory=lambda: [0] * NUM_TAGS)
    llm_seconds: float = 0.0
    host_seconds: float = 0.0

    @property
    def fallback_total(self) -> int:
        return sum(self.fallbacks.values())

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["fallback_total"] = self.fallback_total
        return out


class TagSelector:
    """Chooses a strategy tag per episode with an LLM, for a whole batch at once.

    Args:
      backend: any `types.Backend`; defaults to the embedded model.
      cache: use the prompt cache at all (off for fault benchmarks, where every
        decision must reach the server).
      cache_path: JSONL file backing the cache across runs (optional).
      log_path: the decision log, one JSON line per decision (optional; appended).
      keep_records: also keep the decision records in `self.records`.
      bot_max_hp, npc_max_hp, num_npcs: the maxima written in the prompt.
      batch_timeout_s: a bound on one call's wait for the backend. By default it
        is derived from the backend's own per-request timeout and concurrency
        when it has them, else one hour. Past it, the call's pending prompts
        become "error" fallbacks.
      context: extra fields written into every log line (e.g. bot, combination);
        change it between batches with `selector.context.update(...)`.
      on_call: called as `on_call(stats, done)` after every call, with
        `self.stats` and the number of the batch's episodes already finished
        at that call, e.g. to update a progress bar (it runs on XLA's callback
        thread; keep it quick). It is read at each call, so it can be changed
        between batches.
    """

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        cache: bool = True,
        cache_path: str | os.PathLike | None = None,
        log_path: str | os.PathLike | None = None,
        keep_records: bool = True,
        bot_max_hp: float = BOT_MAX_HP,
        npc_max_hp: float = NPC_MAX_HP,
        num_npcs: int = NUM_NPCS,
        batch_timeout_s: float | None = None,
        context: dict | None = None,
        on_call: Callable[[SelectorStats, int], None] | None = None,
    ):
        self.backend = backend if backend is not None else make_backend("embedded")
        self.cache = PromptCache(cache_path) if cache else None
        self.log_path = Path(log_path) if log_path is not None else None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.keep_records = keep_records
        self.records: list[dict] = []
        self.prompt_limits = {"bot_max_hp": bot_max_hp, "npc_max_hp": npc_max_hp, "num_npcs": num_npcs}
        self.batch_timeout_s = batch_timeout_s
        self.context = dict(context or {})
        self.on_call = on_call
        self.stats = SelectorStats()
        self._lock = threading.Lock()  # XLA may call back from more than one thread
        self._loop: EventLoopThread | None = None

    # -- lifecycle --
    def __enter__(self) -> TagSelector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the backend's connections (if it can) and stops the event loop."""
        if self._loop is None:
            return
        aclose = getattr(self.backend, "aclose", None)
        if aclose is not None:
            try:
                self._loop.run(aclose(), timeout_s=10)
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._loop.close()
        self._loop = None

    def _timeout_for(self, n: int) -> float:
        if self.batch_timeout_s is not None:
            return self.batch_timeout_s
        per_request = getattr(self.backend, "timeout_s", None)
        slots = getattr(self.backend, "concurrency", None)
        if per_request and slots:
            return per_request * math.ceil(n / slots) + 30.0
        return 3600.0

    def _ask(self, prompts: list[Prompt]) -> list[Reply]:
        """Sends prompts to the backend on the run's event loop; never raises."""
        if not prompts:
            return []
        if self._loop is None:
            self._loop = EventLoopThread()
        start = time.perf_counter()
        try:
            replies = self._loop.run(self.backend.generate(prompts), self._timeout_for(len(prompts)))
            if len(replies) != len(prompts):
                raise RuntimeError(f"backend returned {len(replies)} replies for {len(prompts)} prompts")
        except Exception as exc:  # noqa: BLE001 - a broken backend is a fallback, not a crash
            elapsed = time.perf_counter() - start
            replies = [Reply(text="", latency_s=elapsed, error=f"backend: {type(exc).__name__}: {exc}")] * len(prompts)
        self.stats.llm_seconds += time.perf_counter() - start
        return replies

    # -- the call --
    def select(self, features: Any, prev_tags: Any, done: Any, time_s: Any) -> np.ndarray:
        """New tags (N,) int32 for a batch; see the module docstring for the steps.

        Args:
          features: (N, 5) float; columns as in `jaxarena.names.LLM_FEATURES` (HP in points).
          prev_tags: (N,) int; the tag each episode has now.
          done: (N,) bool; finished episodes are skipped and keep their tag.
          time_s: game time of this decision, in seconds (logged).
        """
        with self._lock:
            call_start = time.perf_counter()
            feats = np.asarray(features, dtype=np.float64).reshape(-1, len(LLM_FEATURES))
            prev = np.asarray(prev_tags, dtype=np.int32).reshape(-1)
            finished = np.asarray(done, dtype=bool).reshape(-1)
            game_time = float(np.asarray(time_s))
            new_tags = prev.copy()
            call = self.stats.calls
            self.stats.calls += 1
            active = np.flatnonzero(~finished)

            # Group episodes by prompt: each distinct prompt is resolved once.
            groups: dict[Prompt, list[int]] = {}
            for i in active:
                prompt = build_prompt(*feats[i], **self.prompt_limits)
                groups.setdefault(prompt, []).append(int(i))
            uniques = list(groups)
            decode = getattr(self.backend, "decode", "free")
            keys = [cache_key(self.backend.name, self.backend.model, p, self.backend.options, decode) for p in uniques]

            cached = [self.cache.get(k) if self.cache is not None else None for k in keys]
            to_send = [i for i, reply in enumerate(cached) if reply is None]
            answers: list[tuple[Reply, bool]] = [(reply or Reply("", 0.0), True) for reply in cached]
            for idx, reply in zip(to_send, self._ask([uniques[i] for i in to_send]), strict=True):
                answers[idx] = (reply, False)
            if self.cache is not None:
                self.cache.put_many(
                    [
                        (
                            keys[i],
                            answers[i][0],
                            {"backend": self.backend.name, "model": self.backend.model, "user": uniques[i].user},
                        )
                        for i in to_send
                        if answers[i][0].error is None
                    ]
                )

            lines = []
            for prompt, key, (reply, hit) in zip(uniques, keys, answers, strict=True):
                for rank, episode in enumerate(groups[prompt]):
                    tag, reason = parse_tag(reply, int(prev[episode]))
                    new_tags[episode] = tag
                    self.stats.tags[tag] += 1
                    if reason is not None:
                        self.stats.fallbacks[reason] += 1
                    lines.append(
                        {
                            **self.context,
                            "call": call,
                            "episode": episode,
                            "time_s": round(game_time, 3),
                            "state": {n: round(float(v), 4) for n, v in zip(LLM_FEATURES, feats[episode], strict=True)},
                            "prompt_hash": key[:16],
                            "prev_tag": int(prev[episode]),
                            "reply": reply.text,
                            "decode": decode,
                            "probs": None if reply.probs is None else [round(p, 6) for p in reply.probs],
                            "error": reply.error,
                            "tag": tag,
                            "fallback": reason,
                            "latency_s": round(reply.latency_s, 4),
                            "cache_hit": hit,
                            "shared": rank > 0,  # answered by an identical prompt of this call
                            "backend": self.backend.name,
                            "model": self.backend.model,
                        }
                    )
            lines.sort(key=lambda r: r["episode"])

            self.stats.decisions += len(lines)
            self.stats.unique_prompts += len(uniques)
            self.stats.cache_hits += len(uniques) - len(to_send)
            self.stats.llm_requests += len(to_send)
            self.stats.errors += sum(1 for i in to_send if answers[i][0].error is not None)
            if self.log_path is not None and lines:
                with self.log_path.open("a", encoding="utf-8") as f:
                    f.write("".join(json.dumps(r) + "\n" for r in lines))
            if self.keep_records:
                self.records.extend(lines)
            self.stats.host_seconds += time.perf_counter() - call_start
            if self.on_call is not None:
                self.on_call(self.stats, int(finished.sum()))
            return new_tags

    __call__ = select

    def jax_fn(self) -> Callable:
        """A jittable `tag_fn(features, prev_tags, done, time_s, key) -> tags` calling `select`.

        It uses `io_callback(ordered=True)`, so decisions are logged in the
        order the rollout makes them; the key is unused (the LLM is the
        randomness). Call it once per period for the whole batch, as
        `rollout.make_rollout` does: ordered callbacks cannot be vmapped, so
        batch episodes in the arrays, not with `jax.vmap` around the rollout.
        """
        import jax
        import jax.numpy as jnp
        from jax.experimental import io_callback

        def tag_fn(features, prev_tags, done, time_s, key=None):
            del key
            shape = jax.ShapeDtypeStruct(prev_tags.shape, jnp.int32)
            return io_callback(self.select, shape, features, prev_tags, done, time_s, ordered=True)

        return tag_fn

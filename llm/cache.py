"""The prompt cache: replies keyed by everything that determines them, in memory and on disk.

A re-run with a warm cache makes no LLM calls at all, which is also what
makes a run with a sampling LLM repeatable.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from .types import Prompt, Reply


def cache_key(backend: str, model: str, prompt: Prompt, options: dict, decode: str = "free") -> str:
    """The prompt cache's key: a SHA-256 hex digest of everything that determines the reply.

    Its value is what the on-disk cache files are keyed by; changing how it is
    computed would make every existing cache miss. Free decoding keeps the
    key it always had; a choice is keyed with `decode` added to the options.
    """
    if decode != "free":
        options = {**options, "decode": decode}
    blob = json.dumps(
        {"backend": backend, "model": model, "system": prompt.system, "user": prompt.user, "options": options},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class PromptCache:
    """Replies (text, and a choice's probabilities) by `cache_key`, in memory and, given a path,
    in an append-only JSONL file.

    Only replies that arrived (no backend error) are cached; an invalid reply
    *is* cached, because it is what the model said for that prompt. The file
    is read at start-up (later lines win) and appended to as replies arrive, so
    a crashed run keeps what it had already paid for.
    """

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else None
        self._replies: dict[str, Reply] = {}
        if self.path is not None and self.path.exists():
            with self.path.open(encoding="utf-8") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                        probs = entry.get("probs")
                        self._replies[entry["key"]] = Reply(
                            str(entry["reply"]), 0.0, None, tuple(probs) if probs is not None else None
                        )
                    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                        continue  # a torn last line from a killed run; skip it

    def __len__(self) -> int:
        return len(self._replies)

    def get(self, key: str) -> Reply | None:
        """The cached reply (latency 0), or None."""
        return self._replies.get(key)

    def put_many(self, entries: Sequence[tuple[str, Reply, dict]]) -> None:
        """Stores (key, reply, description) triples; the description is written to disk for humans."""
        for key, reply, _ in entries:
            self._replies[key] = Reply(reply.text, 0.0, None, reply.probs)
        if self.path is not None and entries:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                for key, reply, about in entries:
                    probs = {} if reply.probs is None else {"probs": [round(p, 6) for p in reply.probs]}
                    f.write(json.dumps({"key": key, "reply": reply.text, **probs, **about}) + "\n")

"""The in-graph LLM's decisions on the host: decision records, prompt-cache entries and counters.

A rollout that ran `graph_tags.GraphTagSource.tag_fn` carries the option
logits, the previous tags and each period's game time in its `decision_aux`;
`GraphRecords` turns them into what the host path (`selector.TagSelector`)
writes: the same decision records, the same prompt-cache entries and the
same counters, so the protocol's outputs do not depend on where the LLM ran.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxarena.names import FALLBACK_REASONS, LLM_FEATURES, NUM_TAGS

from .cache import cache_key
from .choice import TAG_OPTIONS, softmax
from .prompt import build_prompt
from .types import Reply


class GraphRecords:
    """Host-side views of a graph-path rollout.

    Args:
      identity: the decisions' backend, model and sampling options
        (`GraphTagSource.identity`); `prompt_hash` is the host path's cache key.
      limits: the maxima the prompts print (`StateLineTokens.limits`).
    """

    def __init__(self, identity: dict, limits: dict):
        self.identity = identity
        self.limits = limits

    def decision_records(self, result, context: dict | None = None, decode: str = "choice") -> list[dict]:
        """The decision log lines of a rollout, with the host path's fields (see `selector.TagSelector`).

        `result` is a `RolloutResult` of a rollout that used `GraphTagSource.tag_fn`. The
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
            prompt = build_prompt(*feats[p, e], **self.limits)
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
            len({build_prompt(*feats[p, e], **self.limits) for e in np.flatnonzero(active[p])})
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

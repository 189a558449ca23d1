"""Where an evaluation's LLM runs, and which model it is: the backend of a spec, the host or graph path.

The LLM that picks the tags runs on one of two paths:

- "host": `selector.TagSelector`, called once per decision period for the
  whole batch through `io_callback`, with the on-disk prompt cache (a warm
  re-run asks the model nothing);
- "graph": `graph_tags.GraphTagSource` inside the jitted rollout (no
  callback; an in-process model's choice decoding only). It reads no prompt
  cache but fills it, so a later host-path run is warm.

"auto" takes the graph path with a cold prompt cache where the model can run
there, and the host path otherwise (`choose_path`). `LLMRun` keeps one run's
backend, path, host selector and graph source, each made once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Where the LLM may be asked to run: "auto", "host" or "graph" (see the module docstring).
LLM_PATHS: tuple[str, ...] = ("auto", "host", "graph")


def backend_for(llm: str, *, model: str | None = None, host: str | None = None, decode=None, adapter=None):
    """The backend of an LLM spec ("embedded", "ollama", "gguf:PATH"), with its model, host, decoding and adapter."""
    from .backends import make_backend, parse_llm_spec

    name, kwargs = parse_llm_spec(llm)
    if name == "ollama":
        kwargs = {"model": model or "mistral", "host": host}
    if decode is not None:
        kwargs["decode"] = decode
    if adapter is not None:
        if name == "ollama":
            raise ValueError("--adapter runs a LoRA adapter in our own forward pass: use --llm embedded or gguf:")
        kwargs["adapter"] = adapter
    return make_backend(name, **kwargs)


def backend_identity(backend) -> dict:
    """What identifies a backend's answers: its name, model, sampling options, decoding (and host, if any)."""
    return {
        "backend": backend.name,
        "model": backend.model,
        "options": dict(backend.options),
        "decode": getattr(backend, "decode", "free"),
        **({"host": backend.host} if getattr(backend, "host", None) else {}),
    }


def cache_is_warm(cache_path: str | Path | None, backend) -> bool:
    """Whether the prompt cache file holds choice replies of this backend's model."""
    if cache_path is None or not Path(cache_path).exists():
        return False
    with Path(cache_path).open(encoding="utf-8") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if entry.get("backend") == backend.name and entry.get("model") == backend.model and "probs" in entry:
                return True
    return False


def choose_path(
    asked: str, backend, *, stored: str | None, cache_path, graph_source: Callable[[], Any], player: str = "B"
) -> tuple[str, str]:
    """("host" or "graph", why) for a backend; `asked` is "auto" or "graph" ("host" needs no choosing).

    stored: the path the stored cells of `player` (the combination the LLM plays in) used, which a
      resumed "auto" run keeps.
    graph_source: builds the in-graph source; it raises `UnsupportedTokenizer` where the model cannot run there.
    """
    from .state_line import UnsupportedTokenizer

    decode = getattr(backend, "decode", "free")
    if decode != "choice" or not hasattr(backend, "load"):
        why = f"the graph path runs an in-process model's choice decoding, not {backend.name} with {decode}"
        if asked == "graph":
            raise ValueError(f"--llm-path graph: {why}; use --llm-path host")
        return "host", why
    if asked == "auto" and stored is not None:
        return stored, f"the run's stored {player} cells used it (resumed)"
    if asked == "auto" and cache_is_warm(cache_path, backend):
        return "host", "the prompt cache already holds this model's replies (a warm re-run is faster on the host)"
    try:
        graph_source()
    except UnsupportedTokenizer as exc:
        if asked == "graph":
            raise
        return "host", str(exc)
    # Measured on an idle 2-core CPU: a cold default protocol took 73 s on the graph path and
    # 114 s on the host path, whose callback leaves the model one of XLA's two threads.
    return "graph", "asked for" if asked == "graph" else "cold prompt cache: no callback per period"


class LLMRun:
    """One evaluation's LLM: its backend, path, host selector and graph source, each made once.

    Args:
      settings: what names the LLM: `llm`, `model`, `host`, `decode`, `adapter`
        and `llm_path` attributes (a `protocol.config.ProtocolConfig`).
      cache_path: the prompt cache (JSONL), or None for none.
      limits: the HP maxima the prompts print (`build_prompt`'s bot_max_hp, npc_max_hp).
      timings: a dict the load times add to (`llm_load_s`), and where the path and
        its reason are written (`llm_path`, `llm_path_reason`).
      stored_path: the path the run's stored cells used, or None (read when "auto" is resolved).
      player: the combination whose tags the LLM picks (named in the path's reason).
      needed: whether the run plays `player` (without, the path is "host").
    """

    def __init__(
        self,
        settings,
        cache_path,
        limits: Callable[[], dict],
        timings: dict,
        *,
        stored_path: Callable[[], str | None] = lambda: None,
        player: str = "B",
        needed: bool = True,
    ):
        self.settings, self.cache_path, self.timings = settings, cache_path, timings
        self._limits, self._stored_path, self._player, self._needed = limits, stored_path, player, needed
        self._backend = self._selector = self._graph = self._path = None

    def backend(self):
        if self._backend is None:
            s = self.settings
            self._backend = backend_for(s.llm, model=s.model, host=s.host, decode=s.decode, adapter=s.adapter)
        return self._backend

    def identity(self) -> dict:
        return backend_identity(self.backend())

    def preflight(self) -> None:
        """Raises `preflight.BackendUnavailable`, with the fix, if the backend cannot answer (one cheap check)."""
        from .preflight import preflight

        preflight(self.backend())

    def path(self) -> str:
        """ "host" or "graph", resolved once (its reason in `timings["llm_path_reason"]`)."""
        if self._path is None:
            asked = self.settings.llm_path
            if asked == "host" or not self._needed:
                self._path = ("host", "asked for" if asked == "host" else f"no Combination {self._player}")
            else:
                self._path = choose_path(
                    asked,
                    self.backend(),
                    stored=self._stored_path(),
                    cache_path=self.cache_path,
                    graph_source=self.graph_source,
                    player=self._player,
                )
            self.timings["llm_path"], self.timings["llm_path_reason"] = self._path
        return self._path[0]

    def graph_source(self):
        """The in-graph tag source (`graph_tags.GraphTagSource`) of the backend's model."""
        if self._graph is None:
            from .graph_tags import GraphTagSource

            t = time.perf_counter()
            self._graph = GraphTagSource.from_backend(self.backend(), **self._limits())
            self.timings["llm_load_s"] = self.timings.get("llm_load_s", 0.0) + time.perf_counter() - t
        return self._graph

    def selector(self):
        """The host path's `TagSelector` (with the prompt cache where there is one)."""
        if self._selector is None:
            from .selector import TagSelector

            backend = self.backend()
            t = time.perf_counter()
            if hasattr(backend, "load"):
                backend.load()  # weights + tokenizer; compiling happens on first use (LLM time)
            self.timings["llm_load_s"] = self.timings.get("llm_load_s", 0.0) + time.perf_counter() - t
            self._selector = TagSelector(
                backend, cache=self.cache_path is not None, cache_path=self.cache_path, **self._limits()
            )
        return self._selector

    def status(self) -> dict:
        """The host selector's counters for a progress bar ({} before it exists)."""
        if self._selector is None:
            return {}
        s = self._selector.stats
        # calls: batched selector calls (one per period per cell); sent: prompts that reached the LLM
        return {"llm_calls": s.calls, "sent": s.llm_requests, "cache_hits": s.cache_hits, "fallbacks": s.fallback_total}

    def close(self) -> None:
        if self._selector is not None:
            self._selector.close()

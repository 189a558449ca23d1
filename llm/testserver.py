"""A local stand-in for an Ollama server, with a real model and fault injection.

It speaks the part of Ollama's HTTP API that `OllamaBackend` uses, so the
backend is tested through the official `ollama` client over real sockets:

    POST /api/chat      {"model", "messages", "options", ...} -> {"message": {"role": "assistant", "content": ...}, ...}
    POST /api/generate  {"model", "prompt", "system", ...}    -> {"response": ..., ...}
    GET  /api/tags      -> {"models": [{"name": ..., "model": ...}]}
    GET  /api/version   -> {"version": ...}

Answers come from a responder:
  - "embedded" (default): the embedded JAX model (`backends.embedded`), so the
    replies are a real model's words; concurrent requests are micro-batched.
  - "hash-digit": a deterministic digit 0-3 from a hash of the state line; fast,
    for tests and benchmarks that count faults rather than judge answers.
  - "fixed:TEXT": always TEXT.

Faults (flags at start-up, or POST /_faults with the same names at run time):
  --delay-s      fixed processing time per request (inside a slot)
  --slots        requests processed at once; the rest queue, as with OLLAMA_NUM_PARALLEL
  --p-timeout    probability the request hangs for --hang-s (longer than the
                 client's timeout) and is then closed unanswered
  --p-http-500   probability of an HTTP 500 with an Ollama-style {"error": ...}
  --p-drop       probability the connection is closed with no response
  --p-garbage    probability of a non-numeric reply ("Surround them!", ...)
  --p-empty      probability of an empty (or blank) reply
  --p-out-of-range  probability of a digit 4-9
  --seed         faults are drawn from one seeded stream in arrival order, so
                 the *counts* over K requests are reproducible

GET /_stats returns the counters (requests, injected faults by kind, unique and
duplicate prompts, the peak number of requests in slots, the last request
body); POST /_reset zeroes them and reseeds.

Run it with `python -m jaxarena.llm.testserver --port 0`; it binds 127.0.0.1
only and prints one JSON line {"event": "listening", "port": N, ...} once it
is ready. `ServerProcess` below starts it from Python (tests, benchmarks).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import os
import queue
import random
import select
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from .types import Prompt

FAULT_KINDS: tuple[str, ...] = ("timeout", "http_500", "drop", "garbage", "empty", "out_of_range")

# Replies for the "garbage" fault. Each starts with a non-digit, non-space
# character, so the parser must classify every one as "non_numeric".
_GARBAGE = ("Surround them!", "I think 2", "The best tactic is Flank.", "?", "**2**", "Tactic: 1", "nan")
_EMPTY = ("", " ", "\n", "  \n\t")


@dataclasses.dataclass
class FaultConfig:
    """What the server does to each generation request (see the module docstring)."""

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


# --- responders ----------------------------------------------------------------

Responder = Callable[[Prompt], str]


def hash_digit(prompt: Prompt) -> str:
    """A deterministic tag for a state line: the same prompt always gets the same digit."""
    return str(hashlib.sha256(prompt.user.encode()).digest()[0] % 4)


class _EmbeddedResponder:
    """Answers with the embedded JAX model, batching requests that arrive together.

    HTTP handler threads each submit one prompt; a single worker thread, which
    owns the model and one event loop, takes whatever is queued (up to `max_batch`)
    and generates for all of it in one batched call.
    """

    def __init__(self, max_batch: int):
        from .backends.embedded import EmbeddedBackend  # heavy import: only when used

        self.backend = EmbeddedBackend(max_batch=max_batch)
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
            try:
                replies = self._loop.run_until_complete(self.backend.generate([p for p, _ in batch]))
                results = [(r.text, r.error) for r in replies]
            except Exception as exc:  # a model failure must answer, not hang, the requests
                results = [("", f"{type(exc).__name__}: {exc}")] * len(batch)
            for (_, box), result in zip(batch, results):
                box.put(result)

    def __call__(self, prompt: Prompt) -> str:
        box: queue.Queue = queue.Queue(maxsize=1)
        self._queue.put((prompt, box))
        text, error = box.get(timeout=600)
        if error is not None:
            raise RuntimeError(error)
        return text


def make_responder(spec: str, max_batch: int) -> tuple[Responder, str]:
    """Returns (responder, default model name) for a --responder value."""
    if spec == "embedded":
        responder = _EmbeddedResponder(max_batch)
        # Compile for the real prompt's shapes before announcing "ready".
        from .prompt import build_prompt

        responder(build_prompt(300, 60, 5, 0, 20.0))
        return responder, responder.model
    if spec == "hash-digit":
        return hash_digit, "test-digit"
    if spec.startswith("fixed:"):
        text = spec[len("fixed:") :]
        return (lambda prompt: text), "test-fixed"
    raise ValueError(f"unknown responder {spec!r}; use embedded, hash-digit or fixed:TEXT")


# --- server state -----------------------------------------------------------------


def _model_key(name: str) -> str:
    """Ollama treats "mistral" and "mistral:latest" as the same model."""
    return name if ":" in name else name + ":latest"


class _State:
    """Fault configuration, the seeded fault stream, the slots and the counters."""

    def __init__(self, config: FaultConfig, responder: Responder, responder_name: str, models: list[str]):
        self.lock = threading.Lock()
        self.slot_free = threading.Condition(self.lock)
        self.stopping = threading.Event()
        self.responder = responder
        self.responder_name = responder_name
        self.models = models
        self.config = config
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.rng = random.Random(self.config.seed)
            self.requests = 0
            self.by_endpoint = {"chat": 0, "generate": 0}
            self.completed = 0
            self.faults = {kind: 0 for kind in FAULT_KINDS}
            self.responder_errors = 0
            self.prompt_counts: dict[str, int] = {}
            self.in_slots = 0
            self.max_in_slots = 0
            self.last_request: dict | None = None

    def configure(self, updates: dict) -> None:
        with self.lock:
            fields = {f.name for f in dataclasses.fields(FaultConfig)}
            unknown = set(updates) - fields
            if unknown:
                raise ValueError(f"unknown fault settings: {sorted(unknown)}")
            new = dataclasses.replace(self.config, **updates)
            new.validate()
            self.config = new
            if "seed" in updates:
                self.rng = random.Random(new.seed)
            self.slot_free.notify_all()  # more slots may now be free

    def admit(self, endpoint: str, prompt: Prompt, body: dict) -> tuple[str | None, str]:
        """Counts a generation request and draws its fault (and faulty text) from the stream."""
        with self.lock:
            self.requests += 1
            self.by_endpoint[endpoint] += 1
            key = hashlib.sha256(json.dumps([prompt.system, prompt.user]).encode()).hexdigest()
            self.prompt_counts[key] = self.prompt_counts.get(key, 0) + 1
            self.last_request = body
            # Exactly two draws per request, whatever the outcome, keep the
            # stream aligned so counts depend only on the number of requests.
            u, v = self.rng.random(), self.rng.random()
            kind, edge = None, 0.0
            for name, p in self.config.probabilities():
                edge += p
                if u < edge:
                    kind = name
                    break
            if kind is not None:
                self.faults[kind] += 1
            text = ""
            if kind == "garbage":
                text = _GARBAGE[int(v * len(_GARBAGE))]
            elif kind == "empty":
                text = _EMPTY[int(v * len(_EMPTY))]
            elif kind == "out_of_range":
                text = str(4 + int(v * 6))
            return kind, text

    def acquire_slot(self) -> None:
        with self.slot_free:
            while self.in_slots >= self.config.slots:
                self.slot_free.wait(timeout=1.0)
            self.in_slots += 1
            self.max_in_slots = max(self.max_in_slots, self.in_slots)

    def release_slot(self) -> None:
        with self.slot_free:
            self.in_slots -= 1
            self.slot_free.notify()

    def stats(self) -> dict:
        with self.lock:
            counts = self.prompt_counts.values()
            return {
                "requests": self.requests,
                "by_endpoint": dict(self.by_endpoint),
                "completed": self.completed,
                "faults": dict(self.faults),
                "responder_errors": self.responder_errors,
                "unique_prompts": len(self.prompt_counts),
                "duplicate_requests": sum(c - 1 for c in counts),
                "max_in_slots": self.max_in_slots,
                "in_slots": self.in_slots,
                "last_request": self.last_request,
                "config": dataclasses.asdict(self.config),
                "responder": self.responder_name,
                "models": list(self.models),
            }


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keep-alive, as Ollama does; every reply therefore sets Content-Length.
    protocol_version = "HTTP/1.1"
    server_version = "jaxarena-testserver"
    # Headers and body go out in two writes; with Nagle's algorithm on, the
    # client's delayed ACK would add ~40 ms to every reply.
    disable_nagle_algorithm = True
    state: _State  # set on the subclass made by `serve`

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # one line per request would swamp the test output

    # -- helpers --
    def _send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_json(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send_json(400, {"error": "invalid JSON body"})
            return None
        if not isinstance(body, dict):
            self._send_json(400, {"error": "JSON body must be an object"})
            return None
        return body

    def _hang_up(self) -> None:
        """Closes the connection without a response, as a crashed or stuck server would."""
        self.close_connection = True

    # -- routes --
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        state = self.state
        if self.path == "/api/version":
            self._send_json(200, {"version": "0.0.0-jaxarena-testserver"})
        elif self.path == "/api/tags":
            models = [{"name": m, "model": m, "size": 0, "digest": "", "details": {}} for m in state.models]
            self._send_json(200, {"models": models})
        elif self.path == "/_stats":
            self._send_json(200, state.stats())
        else:
            self._send_json(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        body = self._read_json()
        if body is None:
            return
        if self.path == "/_faults":
            try:
                self.state.configure(body)
            except (TypeError, ValueError) as exc:
                self._send_json(400, {"error": str(exc)})
                return
            self._send_json(200, dataclasses.asdict(self.state.config))
        elif self.path == "/_reset":
            self.state.reset()
            self._send_json(200, {"ok": True})
        elif self.path in ("/api/chat", "/api/generate"):
            self._generate(body, chat=self.path == "/api/chat")
        else:
            self._send_json(404, {"error": f"no route {self.path}"})

    def _generate(self, body: dict, chat: bool) -> None:
        state = self.state
        model = str(body.get("model", ""))
        if _model_key(model) not in {_model_key(m) for m in state.models}:
            # Real Ollama answers 404 for a model that has not been pulled.
            self._send_json(404, {"error": f'model "{model}" not found, try pulling it first'})
            return
        if chat:
            messages = body.get("messages") or []
            system = "\n".join(m.get("content", "") for m in messages if m.get("role") == "system")
            user = "\n".join(m.get("content", "") for m in messages if m.get("role") == "user")
        else:
            system, user = str(body.get("system") or ""), str(body.get("prompt") or "")
        prompt = Prompt(system=system, user=user)
        kind, fault_text = state.admit("chat" if chat else "generate", prompt, body)

        if kind == "timeout":
            # Hang outside the slots: a stuck request must not also starve the
            # others, or a timeout benchmark would measure queueing instead.
            state.stopping.wait(state.config.hang_s)
            self._hang_up()
            return

        state.acquire_slot()
        try:
            if state.config.delay_s > 0:
                time.sleep(state.config.delay_s)
            if kind == "http_500":
                self._send_json(500, {"error": "injected fault: internal server error"})
                return
            if kind == "drop":
                self._hang_up()
                return
            if kind is not None:
                text = fault_text
            else:
                try:
                    text = state.responder(prompt)
                except Exception as exc:
                    with state.lock:
                        state.responder_errors += 1
                    self._send_json(500, {"error": f"responder failed: {exc}"})
                    return
            with state.lock:
                state.completed += 1
        finally:
            state.release_slot()

        common = {
            "model": model,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "done": True,
            "done_reason": "stop",
        }
        if chat:
            self._send_json(200, {**common, "message": {"role": "assistant", "content": text}})
        else:
            self._send_json(200, {**common, "response": text})


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # hanging requests must never keep the process alive
    request_queue_size = 256  # many clients may connect at once; don't refuse them


def serve(port: int, config: FaultConfig, responder_spec: str, models: list[str] | None) -> None:
    """Loads the responder, binds 127.0.0.1:port, prints the ready line and serves forever."""
    config.validate()
    responder, default_model = make_responder(responder_spec, max_batch=config.slots)
    state = _State(config, responder, responder_spec, models or [default_model])
    handler = type("Handler", (_Handler,), {"state": state})
    server = _Server(("127.0.0.1", port), handler)
    ready = {"event": "listening", "host": "127.0.0.1", "port": server.server_address[1],
             "responder": responder_spec, "models": state.models, "pid": os.getpid()}
    print(json.dumps(ready), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        state.stopping.set()
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    parser.add_argument("--responder", default="embedded", help="embedded (default), hash-digit, fixed:TEXT")
    parser.add_argument("--model", action="append", default=None,
                        help="model name(s) listed by /api/tags and accepted by requests "
                             "(default: the responder's own name)")
    helps = {
        "delay_s": "seconds each request spends in a slot",
        "slots": "requests processed at once (others queue)",
        "p_timeout": "probability a request hangs for --hang-s, then is closed unanswered",
        "p_http_500": "probability of HTTP 500",
        "p_drop": "probability the connection is closed with no response",
        "p_garbage": "probability of a non-numeric reply",
        "p_empty": "probability of an empty reply",
        "p_out_of_range": "probability of a digit 4-9",
        "hang_s": "how long a 'timeout' request hangs",
        "seed": "seed of the fault stream",
    }
    for field in dataclasses.fields(FaultConfig):
        parser.add_argument("--" + field.name.replace("_", "-"), type=type(field.default), default=field.default,
                            help=f"{helps[field.name]} (default {field.default})")
    args = parser.parse_args(argv)
    config = FaultConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(FaultConfig)})
    serve(args.port, config, args.responder, args.model)


# --- starting it from Python --------------------------------------------------------


class ServerProcess:
    """Runs the test server as a child process: `with ServerProcess(responder="hash-digit") as s: ...`.

    `kill()` and `restart()` model a crashed and restarted server; the restart
    reuses the same port, so a client keeps its host URL.
    """

    def __init__(self, responder: str = "embedded", models: list[str] | None = None,
                 port: int = 0, ready_timeout_s: float = 600.0, **faults: Any):
        self.responder = responder
        self.models = models
        self.faults = faults
        self.port = port
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "ServerProcess":
        cmd = [sys.executable, "-m", "jaxarena.llm.testserver", "--port", str(self.port),
               "--responder", self.responder]
        for model in self.models or []:
            cmd += ["--model", model]
        for name, value in self.faults.items():
            cmd += ["--" + name.replace("_", "-"), str(value)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if self.proc.poll() is not None:
                raise RuntimeError(f"test server exited with code {self.proc.returncode} before it was ready")
            if remaining <= 0:
                self.stop()
                raise TimeoutError(f"test server not ready after {self.ready_timeout_s} s")
            readable, _, _ = select.select([self.proc.stdout], [], [], min(remaining, 1.0))
            if readable:
                line = self.proc.stdout.readline()
                if line.startswith("{"):
                    self.port = json.loads(line)["port"]
                    # Keep reading stdout so that a chatty child can never block on a full pipe.
                    threading.Thread(target=self._drain, args=(self.proc.stdout,), daemon=True).start()
                    return self

    @staticmethod
    def _drain(stream) -> None:
        try:
            for _ in stream:
                pass
        except (OSError, ValueError):  # closed by stop()
            pass

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict:
        return self._request("GET", "/_stats")

    def set_faults(self, **faults: Any) -> dict:
        return self._request("POST", "/_faults", faults)

    def reset(self) -> None:
        self._request("POST", "/_reset", {})

    def kill(self) -> None:
        """Kills the process at once (SIGKILL), as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self) -> "ServerProcess":
        """Starts a fresh process on the same port, with the start-up faults."""
        self.kill()
        return self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


if __name__ == "__main__":
    main()

"""A local stand-in for an Ollama server, with a real model and fault injection.

It speaks the part of Ollama's HTTP API that `OllamaBackend` uses, so the
backend is tested through the official `ollama` client over real sockets:

    POST /api/chat      {"model", "messages", "options", ...} -> {"message": {"role": "assistant", "content": ...}, ...}
    POST /api/generate  {"model", "prompt", "system", ...}    -> {"response": ..., ...}
    GET  /api/tags      -> {"models": [{"name": ..., "model": ...}]}
    GET  /api/version   -> {"version": ...}

Answers come from a responder (`responders`): "embedded" (default, the real
model), "hash-digit" (a deterministic digit 0-3) or "fixed:TEXT".

Faults (`faults.FaultConfig`; flags at start-up, or POST /_faults with the
same names at run time): --delay-s, --slots, --p-timeout, --hang-s,
--p-http-500, --p-drop, --p-garbage, --p-empty, --p-out-of-range, --seed.

GET /_stats returns the counters (requests, injected faults by kind, unique and
duplicate prompts, the peak number of requests in slots, the last request
body); POST /_reset zeroes them and reseeds.

Run it with `python -m jaxarena.llm.testing.server --port 0`; it binds
127.0.0.1 only and prints one JSON line {"event": "listening", "port": N, ...}
once it is ready. `process.ServerProcess` starts it from Python (tests, benchmarks).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..types import Prompt
from .faults import FAULT_KINDS, FaultConfig, draw_fault
from .responders import Responder, make_responder


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
            kind, text = draw_fault(self.config, self.rng)
            if kind is not None:
                self.faults[kind] += 1
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
        try:
            choices = format_choices(body.get("format"))
        except ValueError as exc:
            # Ollama answers a schema it cannot turn into a grammar with a 400 in its error shape.
            self._send_json(400, {"error": f"invalid format: {exc}"})
            return
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
                    text = state.responder(prompt, choices)
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


def format_choices(fmt) -> tuple[int, ...] | None:
    """The integer values a request's `format` allows, or None when it has none.

    The test server understands the structured output jaxarena sends for a
    choice, `{"type": "integer", "enum": [...]}`; anything else raises
    ValueError with the reason (the server answers it with HTTP 400).
    """
    if fmt is None or fmt == "":
        return None
    if not isinstance(fmt, dict):
        raise ValueError(f"expected a JSON schema object, got {type(fmt).__name__} {fmt!r}")
    if fmt.get("type") != "integer":
        raise ValueError(f'only {{"type": "integer", "enum": [...]}} is supported here, got type {fmt.get("type")!r}')
    enum = fmt.get("enum")
    if not isinstance(enum, list) or not enum or not all(isinstance(v, int) and not isinstance(v, bool) for v in enum):
        raise ValueError(f'"enum" must be a non-empty list of integers, got {enum!r}')
    if len(set(enum)) != len(enum) or any(not 0 <= v <= 9 for v in enum):
        raise ValueError(f'"enum" values must be distinct single digits, got {enum!r}')
    return tuple(enum)


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
    ready = {
        "event": "listening",
        "host": "127.0.0.1",
        "port": server.server_address[1],
        "responder": responder_spec,
        "models": state.models,
        "pid": os.getpid(),
    }
    print(json.dumps(ready), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        state.stopping.set()
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m jaxarena.llm.testing.server", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    parser.add_argument(
        "--responder", default="embedded", help="embedded (default), hash-digit, coder-fixture, fixed:TEXT"
    )
    parser.add_argument(
        "--model",
        action="append",
        default=None,
        help="model name(s) listed by /api/tags and accepted by requests (default: the responder's own name)",
    )
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
        parser.add_argument(
            "--" + field.name.replace("_", "-"),
            type=type(field.default),
            default=field.default,
            help=f"{helps[field.name]} (default {field.default})",
        )
    args = parser.parse_args(argv)
    config = FaultConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(FaultConfig)})
    serve(args.port, config, args.responder, args.model)


if __name__ == "__main__":
    main()

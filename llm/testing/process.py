"""`ServerProcess`: the test server (`server`) as a child process, started from Python."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

#: What `ServerProcess` runs: `python -m <SERVER_MODULE> --port ...`.
SERVER_MODULE = "jaxarena.llm.testing.server"


class ServerProcess:
    """Runs the test server as a child process: `with ServerProcess(responder="hash-digit") as s: ...`.

    Keyword arguments beyond the named ones are fault settings (`faults.FaultConfig`
    fields, e.g. `slots=1, p_garbage=0.1`), passed as start-up flags.
    `kill()` and `restart()` model a crashed and restarted server; the restart
    reuses the same port, so a client keeps its host URL.
    """

    def __init__(
        self,
        responder: str = "embedded",
        models: list[str] | None = None,
        port: int = 0,
        ready_timeout_s: float = 600.0,
        **faults: Any,
    ):
        self.responder = responder
        self.models = models
        self.faults = faults
        self.port = port
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        cmd = [sys.executable, "-m", SERVER_MODULE, "--port", str(self.port), "--responder", self.responder]
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
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
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

    def restart(self) -> ServerProcess:
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

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

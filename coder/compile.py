"""Compiling a program: check, translate and trace it in a resource-limited subprocess, then load it here.

`compile_program(source)` sends the source to a worker process (`python -m
jaxarena.coder.compile --worker`) that runs the sandbox check, the
translation and an abstract trace (`jax.eval_shape` on one arena's (5, 23)
observation) under `RLIMIT_CPU` and `RLIMIT_AS`, with a wall-clock timeout
on top. Only when that succeeds is the program translated again in this
process (safe: the translator reads the AST and builds JAX ops, and the
worker has just shown it finishes within the limits).

The worker is started once and reused, so a compile costs a translation,
not a Python and JAX start-up; the CPU limit is re-armed per request as the
worker's usage so far plus `cpu_s`. A worker that dies (CPU limit, memory,
wall-clock timeout) is replaced on the next call.

`python -m jaxarena.coder.compile FILE` checks one program and prints the
result (exit status 0 when it compiles, 1 with the error otherwise).
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import math
import os
import resource
import signal
import subprocess
import sys
import threading
import time

from jaxarena.policies import Policy

from .program_error import ProgramError

_MB = 1 << 20
_STARTUP_S = 120.0  # importing JAX on a loaded machine


@dataclasses.dataclass(frozen=True)
class CompiledProgram:
    """A program that compiled: its source and its jittable policy."""

    source: str
    policy: Policy


def compile_program(
    source: str, *, cpu_s: float = 10.0, memory_mb: int = 2048, timeout_s: float | None = None
) -> CompiledProgram:
    """Checks, translates and traces `source` in the limited worker, then returns its policy; else ProgramError.

    cpu_s: CPU seconds the worker may spend on it (rounded up to whole seconds by the OS);
    memory_mb: address space it may add; timeout_s: wall-clock limit (default 3 x cpu_s + 5 s,
    since the machine may be shared). Kinds raised beyond the sandbox's and translator's:
    "timeout", "memory", "shape" (a trace whose actions are not (5,) integers) and "runtime".
    """
    if not isinstance(source, str):
        raise ProgramError("syntax", f"a program is source text (str), got {type(source).__name__}")
    wall = 3.0 * cpu_s + 5.0 if timeout_s is None else float(timeout_s)
    reply = _worker().request({"source": source, "cpu_s": float(cpu_s), "memory_mb": int(memory_mb)}, wall)
    if not reply.get("ok"):
        raise ProgramError.from_dict(reply["error"])
    from .translate import translate

    return CompiledProgram(source=source, policy=translate(source))


class _Worker:
    """The compile subprocess and its JSON-lines pipe; one request at a time."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.buffer = b""
        self.eof = False

    def _start(self) -> None:
        env = dict(os.environ, JAX_PLATFORMS="cpu")  # a trace needs no accelerator
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jaxarena.coder.compile", "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
            env=env,
        )
        self.buffer = b""
        self.eof = False
        ready = self._read_line(_STARTUP_S)
        if ready is None or json.loads(ready).get("ready") is not True:
            self.stop()
            raise ProgramError("runtime", "the compile worker did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        self.proc = None

    def _read_line(self, timeout_s: float) -> bytes | None:
        """One line from the worker within `timeout_s`, or None (timed out or the worker died)."""
        import select

        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                self.eof = True
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def request(self, payload: dict, timeout_s: float) -> dict:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            try:
                self.proc.stdin.write(json.dumps(payload).encode() + b"\n")
            except BrokenPipeError:
                self.stop()
                raise ProgramError("runtime", "the compile worker closed its input") from None
            line = self._read_line(timeout_s)
            if line is None:
                return {"ok": False, "error": self._death(timeout_s, payload)}
            reply = json.loads(line)
            if reply.get("restart"):  # the worker hit a memory error and asks to be replaced
                self.stop()
            return reply

    def _death(self, timeout_s: float, payload: dict) -> dict:
        """The error for a request the worker never answered: it timed out or was killed by a limit."""
        try:  # a worker that closed its output is exiting: wait for its status
            code = self.proc.wait(timeout=0 if self.proc.poll() is None and not self.eof else 10)
        except subprocess.TimeoutExpired:
            code = None
        alive = code is None
        self.stop()
        if alive:
            return _err("timeout", f"compiling took longer than {timeout_s:g} s (wall clock)")
        if code == -signal.SIGXCPU:
            return _err("timeout", f"compiling used more than its {payload['cpu_s']:g} s of CPU time")
        if code in (-signal.SIGKILL, -signal.SIGABRT, -signal.SIGSEGV):
            return _err("memory", f"the compiler was killed (signal {-code}), most likely out of memory")
        return _err("runtime", f"the compiler exited unexpectedly (status {code})")


def _err(kind: str, message: str) -> dict:
    return ProgramError(kind, message).to_dict()


_WORKER = _Worker()
atexit.register(_WORKER.stop)


def _worker() -> _Worker:
    return _WORKER


# -- the worker side


def _address_space() -> int:
    """This process's current virtual memory size in bytes (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _set_soft(which: int, soft: int) -> None:
    _, hard = resource.getrlimit(which)
    resource.setrlimit(which, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _limit(cpu_s: float, memory_mb: int) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # RLIMIT_CPU counts the process's total CPU time in whole seconds: re-armed per request.
    _set_soft(resource.RLIMIT_CPU, math.ceil(usage.ru_utime + usage.ru_stime + max(cpu_s, 1e-3)))
    _set_soft(resource.RLIMIT_AS, _address_space() + int(memory_mb) * _MB)


def _unlimit() -> None:
    for which in (resource.RLIMIT_CPU, resource.RLIMIT_AS):
        _, hard = resource.getrlimit(which)
        resource.setrlimit(which, (hard, hard))


def check_in_this_process(source: str) -> None:
    """Check, translate and trace `source` here (what the worker does per request); raises ProgramError."""
    import jax
    import jax.numpy as jnp

    from jaxarena.names import NUM_NPCS
    from jaxarena.types import OBS_SIZE

    from .translate import translate

    policy = translate(source)
    out = jax.eval_shape(policy, None, jax.ShapeDtypeStruct((NUM_NPCS, OBS_SIZE), jnp.float32), jax.random.key(0))
    if out.shape != (NUM_NPCS,) or not jnp.issubdtype(out.dtype, jnp.integer):
        raise ProgramError("shape", f"the policy gives {out.dtype}{list(out.shape)}, not int32[{NUM_NPCS}] actions")


def _serve() -> None:
    # Imports first, so that limits are armed against the program's work, not JAX's start-up.
    from . import translate as _  # noqa: F401

    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    for raw in sys.stdin.buffer:
        request = json.loads(raw)
        restart = False
        try:
            _limit(request["cpu_s"], request["memory_mb"])
            check_in_this_process(request["source"])
            reply = {"ok": True}
        except ProgramError as e:
            reply = {"ok": False, "error": e.to_dict()}
        except RecursionError:
            reply = {"ok": False, "error": _err("limit", "the program nests too deeply to translate")}
        except Exception as e:  # a translator bug must reach the caller as an error, not kill the loop
            # Allocation failures surface as MemoryError from Python, std::bad_alloc from XLA's C++.
            if isinstance(e, MemoryError) or "bad_alloc" in str(e) or "RESOURCE_EXHAUSTED" in str(e):
                reply = {"ok": False, "error": _err("memory", f"compiling needed more than {request['memory_mb']} MB")}
                restart = True  # state after a failed allocation is not to be trusted
            else:
                reply = {"ok": False, "error": _err("runtime", f"{type(e).__name__}: {e}")}
        finally:
            _unlimit()
        if restart:
            reply["restart"] = True
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()
        if restart:
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxarena.coder.compile", description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", help="a program file (the squad-policy language, docs/coder.md)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cpu-s", type=float, default=10.0)
    parser.add_argument("--memory-mb", type=int, default=2048)
    args = parser.parse_args(argv)
    if args.worker:
        _serve()
        return 0
    if not args.file:
        parser.error("give a program file")
    with open(args.file, encoding="utf-8") as f:
        source = f.read()
    try:
        compile_program(source, cpu_s=args.cpu_s, memory_mb=args.memory_mb)
    except ProgramError as e:
        print(e)
        return 1
    print(f"{args.file}: compiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())

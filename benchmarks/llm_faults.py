"""Fault tolerance of the LLM tag selector: 2,000 decisions per injected fault.

Each scenario drives `TagSelector` (real `OllamaBackend`, real test-server
process) through 2,000 decisions: 40 calls ("decision periods") of 50
episodes, every prompt different and the cache off, so every decision
reaches the server. Scenarios:

  server_down_at_start   nothing listens for the first 10 calls; the server then starts on that port
  killed_mid_run         the server is SIGKILLed while call 15 is in flight and restarted before call 25
  timeout_20             20% of requests hang past the client's timeout
  http_500_20            20% HTTP 500
  garbage_20             20% non-numeric text
  empty_20               20% empty text
  out_of_range_20        20% digits 4-9

Checks per scenario (the JSON line's "checks"):
  - every decision has exactly one log line with a tag (2,000 lines);
  - every fallback keeps the previous tag, and the returned tags equal the logged ones;
  - the log's counts by failure kind equal the server's injected-fault
    counters (for a killed server, whose counters die with it, the log's
    successes after the restart equal the new server's completed requests);
  - the run finishes (each scenario is bounded by the client timeout).

Timeouts: the paper's 40 s timeout would make 400 timeouts take minutes, so
this benchmark uses a 0.5 s client timeout and a server that hangs 3 s; the
mechanism is the same. The replies come from the fast, deterministic
hash-digit responder: the benchmark counts faults and does not judge answers
(pass --responder embedded to use the real model, much slower).

    python benchmarks/llm_faults.py [--calls 40] [--batch 50] [--only timeout_20 ...]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from collections import Counter

import numpy as np

from jaxarena.llm.backends.ollama import OllamaBackend
from jaxarena.llm.selector import TagSelector
from jaxarena.llm.testing import ServerProcess

CLIENT_TIMEOUT_S = 0.5
HANG_S = 3.0
PROBABILITY_SCENARIOS = {
    "timeout_20": ("p_timeout", "timeout"),
    "http_500_20": ("p_http_500", "http_500"),
    "garbage_20": ("p_garbage", "garbage"),
    "empty_20": ("p_empty", "empty"),
    "out_of_range_20": ("p_out_of_range", "out_of_range"),
}
SCENARIOS = ("server_down_at_start", "killed_mid_run", *PROBABILITY_SCENARIOS)


def call_features(call: int, batch: int) -> np.ndarray:
    """(batch, 5) features, different for every (call, episode) pair, so no prompt repeats."""
    k = call * batch + np.arange(batch)
    return np.stack(
        [k % 301, 60.0 - (k // 301) % 61, np.full(batch, 5.0), k % 2, 1.0 + 0.1 * (k // 301)], axis=1
    ).astype(np.float32)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kind_of(record: dict) -> str:
    """ "ok", or the failure's kind: the error's first word, or the parse fallback."""
    if record["error"] is not None:
        return record["error"].split(":")[0]
    return record["fallback"] or "ok"


def drive(selector: TagSelector, calls: int, batch: int, before_call=None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Runs the decisions; returns the tags passed in and returned per call."""
    rng = np.random.default_rng(0)
    prev = rng.integers(0, 4, batch).astype(np.int32)
    ins, outs = [], []
    for call in range(calls):
        if before_call is not None:
            before_call(call)
        ins.append(prev.copy())
        prev = selector.select(call_features(call, batch), prev, np.zeros(batch, bool), 5.0 * call)
        outs.append(prev.copy())
    return ins, outs


def common_checks(selector: TagSelector, ins, outs, calls: int, batch: int) -> dict:
    records = selector.records
    by_call = {}
    for r in records:
        by_call.setdefault(r["call"], []).append(r)
    logged_every_decision = len(records) == calls * batch and all(
        sorted(r["episode"] for r in by_call.get(c, [])) == list(range(batch)) for c in range(calls)
    )
    fallbacks_keep_tag = all(
        r["tag"] == r["prev_tag"] == ins[r["call"]][r["episode"]] for r in records if r["fallback"] is not None
    )
    returned_match_log = all(outs[r["call"]][r["episode"]] == r["tag"] for r in records)
    return {
        "every_decision_logged": logged_every_decision,
        "fallbacks_keep_previous_tag": fallbacks_keep_tag,
        "returned_tags_match_log": returned_match_log,
    }


def run_scenario(name: str, args) -> dict:
    calls, batch = args.calls, args.batch
    start = time.perf_counter()
    extra: dict = {}
    checks: dict = {}
    common = dict(responder=args.responder, models=["mistral"], slots=args.slots, hang_s=HANG_S, seed=args.seed)

    def selector_for(url: str) -> TagSelector:
        backend = OllamaBackend("mistral", url, timeout_s=CLIENT_TIMEOUT_S, concurrency=args.slots)
        return TagSelector(backend, cache=False)

    if name in PROBABILITY_SCENARIOS:
        flag, kind = PROBABILITY_SCENARIOS[name]
        with ServerProcess(**common, **{flag: 0.2}) as server, selector_for(server.url) as selector:
            ins, outs = drive(selector, calls, batch)
            stats = server.stats()
        log_kinds = Counter(kind_of(r) for r in selector.records)
        fallback_kind = {
            "timeout": "timeout",
            "http_500": "http_500",
            "garbage": "non_numeric",
            "empty": "empty",
            "out_of_range": "out_of_range",
        }[kind]
        checks["log_matches_server_faults"] = (
            log_kinds[fallback_kind] == stats["faults"][kind] == sum(stats["faults"].values())
            and log_kinds["ok"] == calls * batch - stats["faults"][kind]
        )
        checks["server_saw_every_decision"] = stats["requests"] == calls * batch
        extra = {"server_faults": {kind: stats["faults"][kind]}, "server_requests": stats["requests"]}

    elif name == "server_down_at_start":
        port = free_port()
        down_calls = 10
        server = ServerProcess(**common, port=port)
        with selector_for(server.url) as selector:
            try:
                ins, outs = drive(
                    selector, calls, batch, before_call=lambda c: server.start() if c == down_calls else None
                )
                stats = server.stats()
            finally:
                server.stop()
        log_kinds = Counter(kind_of(r) for r in selector.records)
        down = [kind_of(r) for r in selector.records if r["call"] < down_calls]
        checks["down_calls_are_connect_errors"] = down == ["connect"] * (down_calls * batch)
        checks["log_matches_server"] = (
            log_kinds["ok"] == stats["completed"] == stats["requests"] == (calls - down_calls) * batch
        )
        extra = {"down_calls": down_calls, "server_requests_after_start": stats["requests"]}

    elif name == "killed_mid_run":
        kill_call, restart_call = 15, 25
        with ServerProcess(**common, delay_s=0.02) as server, selector_for(server.url) as selector:
            killer: list[threading.Timer] = []

            def before(call: int) -> None:
                if call == kill_call:  # kill while this call's requests are in flight
                    timer = threading.Timer(0.1, server.kill)
                    killer.append(timer)
                    timer.start()
                elif call == restart_call:
                    server.start()

            ins, outs = drive(selector, calls, batch, before_call=before)
            for timer in killer:
                timer.join()
            stats = server.stats()  # the restarted server's counters
        log_kinds = Counter(kind_of(r) for r in selector.records)
        after = [r for r in selector.records if r["call"] >= restart_call]
        during = [kind_of(r) for r in selector.records if kill_call < r["call"] < restart_call]
        killed = Counter(kind_of(r) for r in selector.records if r["call"] == kill_call)
        checks["calls_while_down_are_connect_errors"] = set(during) == {"connect"}
        checks["kill_hit_in_flight_requests"] = killed["ok"] < batch and (
            killed["ok"] + killed["connect"] + killed["disconnect"] + killed["transport"] == batch
        )
        checks["log_matches_restarted_server"] = (
            sum(kind_of(r) == "ok" for r in after) == stats["completed"] == stats["requests"] == len(after)
        )
        extra = {"kill_call": kill_call, "restart_call": restart_call, "killed_call_kinds": dict(killed)}
    else:
        raise ValueError(name)

    checks.update(common_checks(selector, ins, outs, calls, batch))
    seconds = time.perf_counter() - start
    checks["finished_in_bound"] = seconds < args.bound_s
    return {
        "bench": "llm_faults",
        "scenario": name,
        "decisions": len(selector.records),
        "log_kinds": dict(sorted(Counter(kind_of(r) for r in selector.records).items())),
        "fallbacks": {k: v for k, v in selector.stats.fallbacks.items() if v},
        **extra,
        "seconds": round(seconds, 2),
        "checks": checks,
        "pass": all(checks.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--slots", type=int, default=8, help="server slots and client concurrency")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--responder", default="hash-digit")
    parser.add_argument("--bound-s", type=float, default=300.0, help="a scenario must finish within this")
    parser.add_argument("--only", nargs="*", choices=SCENARIOS, default=list(SCENARIOS))
    args = parser.parse_args()
    print(
        json.dumps(
            {
                "bench": "llm_faults",
                "setup": True,
                "calls": args.calls,
                "batch": args.batch,
                "slots": args.slots,
                "client_timeout_s": CLIENT_TIMEOUT_S,
                "server_hang_s": HANG_S,
                "responder": args.responder,
            }
        ),
        flush=True,
    )
    results = []
    for name in args.only:
        result = run_scenario(name, args)
        results.append(result)
        print(json.dumps(result), flush=True)
    ok = all(r["pass"] for r in results)
    print(
        json.dumps(
            {
                "bench": "llm_faults",
                "summary": True,
                "scenarios": len(results),
                "decisions": sum(r["decisions"] for r in results),
                "pass": ok,
            }
        ),
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

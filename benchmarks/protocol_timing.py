"""Time the evaluation protocol the way a user meets it: fresh processes, both LLM paths, cold then warm cache.

    python benchmarks/protocol_timing.py                     # shipped A and B, embedded LLM
    python benchmarks/protocol_timing.py --policy-b A        # a stand-in B policy
    python benchmarks/protocol_timing.py --skip-host         # the in-graph run only

Runs, each in a new Python process (so imports and compiles count):

1. `a_only`: Combination A alone (3 bots x episodes), incl. compile;
2. `graph`: the whole protocol with the LLM inside the jitted rollout
   (`--llm-path graph`; no prompt cache on that path);
3. `cold`: the whole protocol on the host path with an empty prompt cache;
4. `warm`: the host path again into another run directory, same cache;

then checks that `cold` and `warm` wrote identical episodes.csv and identical
decisions (ignoring latency and cache-hit fields), and measures how often the
two paths choose the same tag *on the same states*: every decision state of
the `graph` run is put to the host path (its replies come from the cold
run's prompt cache where that run met the same prompt, else from the model).
Prints one JSON line per run (process wall time, the summary's compile /
simulation / LLM split and LLM counters) and one per check.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "evaluate.py"


def run(out: Path, run_id: str, cache: Path | None, extra: list[str]) -> dict:
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), "--run-id", run_id, "--no-progress", "--fresh"]
    cmd += ["--cache", str(cache)] if cache is not None else ["--no-cache"]
    t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd + extra, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    s = json.loads((out / run_id / "summary.json").read_text())
    tm, lc = s["timings"], s.get("llm_counters") or {}
    return {
        "run": run_id,
        "llm_path": tm.get("llm_path"),
        "process_wall_s": round(wall, 2),
        # CPU seconds of the run's process (all threads): less sensitive to other load than wall time.
        "process_cpu_s": round(cpu, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "compile_s": round(tm["cells_compile_s"], 2),
        "simulation_s": round(tm["cells_simulation_s"], 2),
        "llm_s": round(tm["cells_llm_s"], 2),
        "policy_load_s": round(tm["policy_load_s"], 2),
        "llm_load_s": round(tm["llm_load_s"], 2),
        **{
            k: lc.get(k)
            for k in ("calls", "decisions", "distinct_prompts", "llm_requests", "cache_hits", "fallback_total")
        },
    }


def decisions(path: Path) -> list[dict]:
    volatile = {"latency_s", "cache_hit"}
    return [{k: v for k, v in json.loads(line).items() if k not in volatile} for line in path.read_text().splitlines()]


def path_agreement(graph_run: Path, cache: Path) -> dict:
    """Tags of the graph run's decisions vs the host path's tags for the same states."""
    import numpy as np

    from jaxarena.llm.backends import make_backend
    from jaxarena.llm.cache import PromptCache, cache_key
    from jaxarena.llm.prompt import build_prompt, parse_tag
    from jaxarena.names import LLM_FEATURES

    records = [json.loads(line) for line in (graph_run / "decisions.jsonl").read_text().splitlines()]
    backend = make_backend("embedded")
    host_cache = PromptCache(cache)
    prompts = [build_prompt(*(r["state"][k] for k in LLM_FEATURES)) for r in records]
    keys = [cache_key(backend.name, backend.model, p, backend.options, backend.decode) for p in prompts]
    replies = {k: host_cache.get(k) for k in set(keys)}
    missing = [k for k, v in replies.items() if v is None]
    by_key = dict(zip(keys, prompts, strict=True))
    t = time.perf_counter()
    for k, reply in zip(missing, backend.generate_sync([by_key[k] for k in missing]), strict=True):
        replies[k] = reply
    host_s = time.perf_counter() - t
    host_tags = np.asarray([parse_tag(replies[k], 0)[0] for k in keys])
    graph_tags = np.asarray([r["tag"] for r in records])
    host_probs = np.asarray([replies[k].probs for k in keys])
    graph_probs = np.asarray([r["probs"] for r in records])
    tempered = host_probs**10 / (host_probs**10).sum(-1, keepdims=True)
    differ = graph_tags != host_tags
    return {
        "check": "graph_vs_host_same_states",
        "decisions": len(records),
        "agreement": round(float(1 - differ.mean()), 5),
        "disagreements": int(differ.sum()),
        "host_argmax_vs_graph_argmax": round(float((host_probs.argmax(-1) == graph_probs.argmax(-1)).mean()), 5),
        "nucleus_of_2plus": int((tempered.max(-1) < 0.9).sum()),  # where the draw's key can matter
        "max_abs_prob_diff": round(float(np.abs(host_probs - graph_probs).max()), 5),
        "host_prompts_from_cache": len(replies) - len(missing),
        "host_prompts_computed": len(missing),
        "host_compute_s": round(host_s, 1),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--policy-a", default="A")
    p.add_argument("--policy-b", default="B")
    p.add_argument("--out", default=None, help="results root (default: a temporary directory)")
    p.add_argument("--skip-host", action="store_true", help="only a_only and the graph run")
    args = p.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="protocol_timing_"))
    cache = out / "cache.jsonl"
    cache.unlink(missing_ok=True)
    common = ["--episodes", str(args.episodes), "--policy-a", args.policy_a, "--policy-b", args.policy_b]
    runs = [("a_only", None, ["--combinations", "A"]), ("graph", None, ["--llm-path", "graph"])]
    if not args.skip_host:
        runs += [("cold", cache, ["--llm-path", "host"]), ("warm", cache, ["--llm-path", "host"])]
    for run_id, run_cache, extra in runs:
        print(json.dumps(run(out, run_id, run_cache, common + extra)), flush=True)
    if args.skip_host:
        return 0
    same_csv = (out / "cold" / "episodes.csv").read_bytes() == (out / "warm" / "episodes.csv").read_bytes()
    same_dec = decisions(out / "cold" / "decisions.jsonl") == decisions(out / "warm" / "decisions.jsonl")
    check = {"episodes_csv_identical": same_csv, "decisions_identical": same_dec, "out": str(out)}
    print(json.dumps({"check": "cold_vs_warm", **check}), flush=True)
    print(json.dumps(path_agreement(out / "graph", cache)), flush=True)
    return 0 if same_csv and same_dec else 1


if __name__ == "__main__":
    raise SystemExit(main())

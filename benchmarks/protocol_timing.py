"""Time the evaluation protocol the way a user meets it: fresh processes, cold then warm LLM cache.

    python benchmarks/protocol_timing.py                     # shipped A and B, embedded LLM
    python benchmarks/protocol_timing.py --policy-b A        # a stand-in B policy

Runs, each in a new Python process (so imports and compiles count):

1. `a_only`: Combination A alone (3 bots x episodes), incl. compile;
2. `cold`: the whole protocol with an empty prompt cache;
3. `warm`: the whole protocol again into another run directory, same cache;

then checks that `cold` and `warm` wrote identical episodes.csv and identical
decisions (ignoring latency and cache-hit fields). Prints one JSON line per
run (process wall time, the summary's compile / simulation / LLM split and LLM
counters) and one with the checks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "evaluate.py"


def run(out: Path, run_id: str, cache: Path, extra: list[str]) -> dict:
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--out",
        str(out),
        "--run-id",
        run_id,
        "--cache",
        str(cache),
        "--no-progress",
        "--fresh",
        *extra,
    ]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    s = json.loads((out / run_id / "summary.json").read_text())
    tm, lc = s["timings"], s.get("llm_counters") or {}
    return {
        "run": run_id,
        "process_wall_s": round(wall, 2),
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--policy-a", default="A")
    p.add_argument("--policy-b", default="B")
    p.add_argument("--out", default=None, help="results root (default: a temporary directory)")
    args = p.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="protocol_timing_"))
    cache = out / "cache.jsonl"
    cache.unlink(missing_ok=True)
    common = ["--episodes", str(args.episodes), "--policy-a", args.policy_a, "--policy-b", args.policy_b]
    for run_id, extra in (("a_only", ["--combinations", "A"]), ("cold", []), ("warm", [])):
        print(json.dumps(run(out, run_id, cache, common + extra)), flush=True)
    same_csv = (out / "cold" / "episodes.csv").read_bytes() == (out / "warm" / "episodes.csv").read_bytes()
    same_dec = decisions(out / "cold" / "decisions.jsonl") == decisions(out / "warm" / "decisions.jsonl")
    print(
        json.dumps(
            {
                "check": "cold_vs_warm",
                "episodes_csv_identical": same_csv,
                "decisions_identical": same_dec,
                "out": str(out),
            }
        )
    )
    return 0 if same_csv and same_dec else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Two processes (`jaxarena-train --distributed`, gloo) against one process with two devices: time and result.

    python benchmarks/distributed_training.py                        # 192 envs x 128 steps, 6 updates, 2 rounds
    python benchmarks/distributed_training.py --num-envs 16 --num-steps 16 --rounds 1

Each round runs the same `jaxarena-train` command twice, alternating the layout so that load
on a shared machine hits both alike: as 2 processes of one CPU device each (the localhost
recipe of docs/distributed.md) and as one process with 2 forced host devices. Both train on
the same 2-device mesh. Per run: the chunk's compile time (the command's own line), the
env-steps/s of the chunks after the first (from metrics.jsonl's wall_s; the first chunk holds
the compile), the command's wall time, the load average around it, and the largest parameter
difference to the first single-process run. One JSON line per run, then a summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-envs", type=int, default=192)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--updates", type=int, default=6)
    p.add_argument("--chunk", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    return p.parse_args()


def _run(layout: str, argv: list[str], out: Path) -> tuple[float, str]:
    """Wall seconds and process 0's stdout of one run in `layout` ("2 processes" or "1 process")."""
    from jaxarena.algorithms.distributed import launch_local, local_cpu_env

    t0 = time.time()
    if layout == "2 processes":
        results = launch_local([*argv, "--out", str(out)], 2, out.with_suffix(".logs"), env=local_cpu_env())
    else:
        cmd = [sys.executable, "-m", "jaxarena.algorithms.train_loop", *argv, "--out", str(out)]
        proc = subprocess.run(
            cmd,
            env=local_cpu_env("--xla_force_host_platform_device_count=2"),
            capture_output=True,
            text=True,
            check=False,
        )
        results = [(proc.returncode, proc.stdout, proc.stderr)]
    wall = time.time() - t0
    for code, _, err in results:
        if code != 0:
            raise SystemExit(f"{layout} failed ({code}):\n{err[-3000:]}")
    return wall, results[0][1]


def _measure(layout: str, args, argv: list[str], out: Path, reference) -> dict:
    from jaxarena.algorithms.checkpoint import load_params

    load_before = os.getloadavg()[0]
    wall, stdout = _run(layout, argv, out)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    first_chunk_end = rows[args.chunk - 1]["wall_s"]
    timed_updates = len(rows) - args.chunk
    sps = timed_updates * args.num_envs * args.num_steps / (rows[-1]["wall_s"] - first_chunk_end)
    params = load_params(out)[1]
    diff = None
    if reference is not None:
        import jax

        gaps = jax.tree.map(lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))), params, reference)
        diff = max(jax.tree.leaves(gaps))
    return {
        "layout": layout,
        "compile_s": float(re.search(r"compiled a \d+-update chunk in ([\d.]+) s", stdout).group(1)),
        "env_steps_per_s": round(sps),
        "wall_s": round(wall, 1),
        "max_param_diff_to_first_1_process_run": diff,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "params": params,
    }


def main():
    args = parse()
    total = args.updates * args.num_envs * args.num_steps
    argv = f"--num-envs {args.num_envs} --num-steps {args.num_steps} --total-steps {total} --chunk {args.chunk}"
    argv = [*argv.split(), "--checkpoint-every", "1000", "--no-progress"]  # one save, after the last chunk
    runs, reference = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for layout in ("1 process", "2 processes") if r % 2 == 0 else ("2 processes", "1 process"):
                row = _measure(layout, args, argv, Path(tmp) / f"{r}-{layout.replace(' ', '_')}", reference)
                if reference is None and layout == "1 process":
                    reference = row["params"]
                    row["max_param_diff_to_first_1_process_run"] = 0.0
                runs.append({k: v for k, v in row.items() if k != "params"})
                print(json.dumps({"round": r, **runs[-1]}), flush=True)
    by = {lay: [x for x in runs if x["layout"] == lay] for lay in ("1 process", "2 processes")}
    sps = {lay: float(np.median([x["env_steps_per_s"] for x in rows])) for lay, rows in by.items()}
    print(
        json.dumps(
            {
                "summary": f"{args.num_envs} envs x {args.num_steps} steps, 2 devices, {args.rounds} rounds",
                "median_env_steps_per_s": sps,
                "two_processes_over_one": round(sps["2 processes"] / sps["1 process"], 3),
                "median_compile_s": {lay: float(np.median([x["compile_s"] for x in rows])) for lay, rows in by.items()},
                "max_param_diff": max(x["max_param_diff_to_first_1_process_run"] for x in runs),
                "load_range": [min(x["load_before"] for x in runs), max(x["load_after"] for x in runs)],
            }
        )
    )


if __name__ == "__main__":
    main()

"""Training over two processes (`jaxarena-train --distributed`) on this machine's CPU.

Each process is a subprocess with one CPU device; they meet through a coordinator on a free
localhost port and reduce over gloo. The reference is the single-process run over two forced
host devices (`XLA_FLAGS=--xla_force_host_platform_device_count=2`): the same global mesh of
two devices, partitioned the same way, so the two must train alike.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from jaxarena.algorithms.distributed import launch_local, local_cpu_env
from jaxarena.algorithms.train_loop import main
from jaxarena.algorithms.train_metrics import read_row

# 4 envs (2 per device), 8 ticks, one epoch of 2 minibatches: the smallest run that still
# splits the env batch and reduces gradients across the processes. Chunks of one update
# leave a checkpoint after each of the 3 updates (--keep 0 keeps them all).
TINY = "--num-envs 4 --num-steps 8 --hidden 16 --bots aggressive evasive --total-steps 96 --chunk 1 --keep 0"
TINY = [*TINY.split(), "--no-progress", "--set", "update_epochs=1", "num_minibatches=2"]
# A stuck peer would otherwise wait for the coordinator's own timeouts (minutes).
TIMEOUT_S = 420


def _launch(argv: list[str], n: int, logs: Path) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each of `n` processes of `jaxarena-train --distributed ARGV`."""
    return launch_local(argv, n, logs, env=local_cpu_env(), timeout_s=TIMEOUT_S)


def _state(run_dir: Path, step: int) -> dict:
    """The full runner state of checkpoint `step`, as numpy arrays (whichever topology wrote it)."""
    path = (run_dir / "checkpoints" / str(step) / "state").resolve()
    ckptr = ocp.PyTreeCheckpointer()
    tree = ckptr.metadata(path).item_metadata.tree
    as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    return ckptr.restore(path, args=ocp.args.PyTreeRestore(restore_args=as_numpy))


def _leaves(state: dict) -> dict[str, np.ndarray]:
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree.leaves_with_path(state)}


def _metrics(run_dir: Path) -> list[dict]:
    rows = [read_row(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]  # null: NaN
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> tuple[Path, list]:
    """A 3-update run of two processes: its directory and each process's (status, stdout, stderr)."""
    root = tmp_path_factory.mktemp("distributed")
    results = _launch([*TINY, "--out", str(root / "run")], 2, root / "logs")
    for code, out, err in results:
        assert code == 0, out[-2000:] + err[-3000:]
    return root / "run", results


@pytest.mark.slow  # two processes compile the update and train (~60 s here); then the reference (~40 s)
def test_two_processes_train_like_two_devices_in_one(two_process_run, tmp_path):
    run, results = two_process_run
    (_, out0, _), (_, out1, _) = results
    assert "4 envs on 2 cpu device(s) of 2 processes (sharded)" in out0
    # Process 0 alone prints (and writes the files checked below); gloo's own connection line is all 1 says.
    assert "checkpoint:" in out0 and [line for line in out1.splitlines() if not line.startswith("[Gloo]")] == []
    assert [row["update"] for row in _metrics(run)] == [1, 2, 3]  # one writer: no row twice

    ref = tmp_path / "ref"
    proc = subprocess.run(
        [sys.executable, "-m", "jaxarena.algorithms.train_loop", *TINY, "--out", str(ref)],
        env=local_cpu_env("--xla_force_host_platform_device_count=2"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "4 envs on 2 cpu device(s) (sharded)" in proc.stdout
    # Both runs execute the same partitioned program on the same 2-device mesh; they differ only
    # in who carries the all-reduce (gloo between processes, or XLA within one). Each reduction
    # adds the two devices' partial sums, and a sum of two floats does not depend on its order,
    # so the states agree to the bit on this machine. The tolerance (1e-6 absolute, float32's
    # precision relative) leaves room for a collective that splits its buffers differently.
    got, want = _leaves(_state(run, 3)), _leaves(_state(ref, 3))
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-6, err_msg=name)
    for row, ref_row in zip(_metrics(run), _metrics(ref), strict=True):
        assert row.keys() == ref_row.keys()
        np.testing.assert_allclose([row[k] for k in row], [ref_row[k] for k in row], rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # a second two-process run, resuming (~60 s here)
def test_a_two_process_run_resumes_its_checkpoint_to_the_uninterrupted_state(two_process_run, tmp_path):
    run, _ = two_process_run
    # What a kill during the last chunk's save leaves: checkpoint 2 complete, update 3's metrics row
    # written (rows are logged before the save), checkpoint 3 absent.
    cut = tmp_path / "cut"
    shutil.copytree(run, cut)
    shutil.rmtree(cut / "checkpoints" / "3")
    results = _launch([*TINY, "--out", str(cut)], 2, tmp_path / "logs")
    for code, out, err in results:
        assert code == 0, out[-2000:] + err[-3000:]
    assert "resumed" in results[0][1] and "at update 2/3" in results[0][1]
    # Every process restored its part of update 2 and went on to update 3: the whole state, the
    # environments, the optimiser and the key included, is the uninterrupted run's to the bit.
    got, want = _leaves(_state(cut, 3)), _leaves(_state(run, 3))
    assert got.keys() == want.keys()
    unequal = [name for name in want if not np.array_equal(got[name], want[name])]
    assert not unequal, unequal
    # Update 3's stale row replaced, not duplicated. assert_equal holds NaN equal to NaN (a missing number).
    np.testing.assert_equal(_metrics(cut), _metrics(run))


def test_a_bad_distributed_command_is_one_line_before_anything_starts(tmp_path, capsys):
    out = ["--out", str(tmp_path / "run")]
    cases = [
        (["--distributed", "--coordinator-address", "localhost:1", "--num-processes", "2", "--process-id", "2"],
         "--process-id 2 is out of range: it must be 0..1 for --num-processes 2"),
        (["--process-id", "0"], "--process-id needs --distributed"),
        (["--distributed", "--coordinator-address", "node0"], "must be HOST:PORT"),
        (["--distributed", "--num-processes", "0"], "--num-processes must be at least 1"),
        (["--distributed", "--coordinator-timeout", "0"], "--coordinator-timeout must be a positive number"),
        (["--distributed", "--coordinator-timeout", "nan"], "--coordinator-timeout must be a positive number"),
        (["--coordinator-timeout", "5"], "--coordinator-timeout needs --distributed"),
    ]  # fmt: skip
    for argv, words in cases:
        assert main([*argv, *out, "--keep-xla-flags"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("jaxarena-train: error: ") and words in err, err
        assert len(err.splitlines()) == 1


def test_distributed_without_a_coordinator_says_where_it_comes_from(tmp_path):
    # In a fresh process: jax.distributed.initialize must come before JAX's backends, which this one has built.
    cmd = [sys.executable, "-m", "jaxarena.algorithms.train_loop", "--distributed", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, env=local_cpu_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("jaxarena-train: error: --distributed: coordinator_address should be defined")
    assert "--coordinator-address HOST:PORT" in line and "SLURM" in line


def test_a_process_whose_coordinator_never_answers_stops_with_one_line(tmp_path):
    # Nothing listens on the port: without the check, JAX aborts the process with a stack trace.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "jaxarena.algorithms.train_loop", "--distributed", "--out", str(tmp_path),
           "--coordinator-address", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", "1",
           "--coordinator-timeout", "2"]  # fmt: skip
    proc = subprocess.run(cmd, env=local_cpu_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    expected = f"jaxarena-train: error: --distributed: no coordinator answered at 127.0.0.1:{port} within 2 s"
    assert line.startswith(expected), line
    assert "Start process 0" in line


def test_two_processes_see_both_devices_and_refuse_envs_that_do_not_split(tmp_path):
    """The fast check of the real start-up: two processes connect, count 2 devices, and stop before compiling."""
    results = _launch([*TINY, "--num-envs", "3", "--out", str(tmp_path / "run")], 2, tmp_path / "logs")
    for code, _, err in results:
        assert code == 2, err[-3000:]
        lines = [line for line in err.splitlines() if line.startswith("jaxarena-train: error:")]
        assert lines == [
            "jaxarena-train: error: --num-envs 3 must be a multiple of the 2 devices of the 2 processes: "
            "num_envs is the run's total, split evenly over every device"
        ], err
    assert not (tmp_path / "run" / "checkpoints").exists()

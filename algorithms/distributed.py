"""Training over several processes and hosts with `jax.distributed`: start-up, the global mesh, host copies.

    jaxarena-train --distributed --coordinator-address host0:1234 --num-processes 2 --process-id 0 ...
    jaxarena-train --distributed ...          (under SLURM or Open MPI: jax finds the rest itself)

Every process runs the same jitted program over a 1-D mesh of all processes'
devices: the env batch is split over that mesh (each process steps its own
share of the arenas), the parameters are replicated, and XLA's partitioner
inserts the cross-process communication (the update itself is the one a
single process with every device would make). Every process must be started
with the same arguments; they differ only in their process id.
docs/distributed.md has the recipes.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from jaxarena.cli_errors import UserError

FLAGS = ("coordinator_address", "num_processes", "process_id", "coordinator_timeout")
#: How long a process waits for the coordinator and the others when --coordinator-timeout is not given.
DEFAULT_TIMEOUT_S = 300.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command line's `--distributed` group."""
    g = parser.add_argument_group("several processes or hosts (jax.distributed; docs/distributed.md)")
    g.add_argument(
        "--distributed",
        action="store_true",
        help="join a multi-process run: one process per host or per GPU, each started with the same arguments",
    )
    g.add_argument(
        "--coordinator-address",
        default=None,
        metavar="HOST:PORT",
        help="process 0's address and a free port (default: $JAX_COORDINATOR_ADDRESS or the cluster's, e.g. SLURM)",
    )
    g.add_argument("--num-processes", type=int, default=None, help="processes in the run (default: the cluster's)")
    g.add_argument("--process-id", type=int, default=None, help="this process, 0..N-1 (default: the cluster's)")
    g.add_argument(
        "--coordinator-timeout",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds to wait for the coordinator and for every process to join (default {DEFAULT_TIMEOUT_S:g})",
    )


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse contradictory `--distributed` flags before anything starts (a UserError says which)."""
    given = [f"--{name.replace('_', '-')}" for name in FLAGS if getattr(args, name) is not None]
    if given and not args.distributed:
        raise UserError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --distributed")
    n, i, address = args.num_processes, args.process_id, args.coordinator_address
    if n is not None and n < 1:
        raise UserError(f"--num-processes must be at least 1, got {n}")
    if i is not None and (i < 0 or (n is not None and i >= n)):
        bound = f"0..{n - 1} for --num-processes {n}" if n is not None else "a non-negative integer"
        raise UserError(f"--process-id {i} is out of range: it must be {bound}")
    if address is not None:
        check_address(address, "--coordinator-address")
    timeout = args.coordinator_timeout
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise UserError(f"--coordinator-timeout must be a positive number of seconds, got {timeout}")


def check_address(address: str, given_by: str) -> None:
    """A UserError naming `given_by` (the flag or variable) unless `address` is HOST:PORT."""
    if not address.rpartition(":")[2].isdigit():
        raise UserError(f"{given_by} {address!r} must be HOST:PORT, e.g. node0:1234")


def wait_for_coordinator(address: str, timeout_s: float) -> None:
    """Return once `address` (HOST:PORT) accepts a TCP connection; a UserError after `timeout_s`.

    JAX's own wait for an absent coordinator ends by aborting the process with a
    stack trace, so a process other than 0 checks first and says what to do.
    """
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
                return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise UserError(
                    f"--distributed: no coordinator answered at {address} within {timeout_s:g} s "
                    f"({exc.strerror or exc}). "
                    "Start process 0 (it serves that address), check the host and port, or raise "
                    "--coordinator-timeout"
                ) from None
            time.sleep(0.2)


def initialize(args: argparse.Namespace) -> None:
    """`jax.distributed.initialize` from the flags (or, where absent, the environment); call before any JAX use."""
    check_arguments(args)
    import jax

    # Cross-process collectives on CPU need an implementation; gloo ships with jaxlib. A user's own
    # choice (JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi) is kept. GPUs use NCCL whatever this says.
    if not os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    address = args.coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
    if address and not args.coordinator_address:
        check_address(address, "JAX_COORDINATOR_ADDRESS")  # the flag's was checked with the others
    timeout = args.coordinator_timeout or DEFAULT_TIMEOUT_S
    # Only with an explicit id: under SLURM or Open MPI, JAX reads the id itself, after this point.
    if address and args.process_id not in (None, 0):
        wait_for_coordinator(address, timeout)
    try:
        jax.distributed.initialize(
            coordinator_address=args.coordinator_address,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=max(1, int(timeout)),
        )
    except ValueError as exc:  # jax's words name its own arguments; say which flag supplies each
        if not any(name in str(exc) for name in ("coordinator_address", "Number of processes", "process id")):
            raise
        raise UserError(
            f"--distributed: {exc} Pass --coordinator-address HOST:PORT, --num-processes N and --process-id I "
            "(or set JAX_COORDINATOR_ADDRESS), or launch under SLURM or Open MPI, whose environment names them"
        ) from None


def is_primary() -> bool:
    """True on the process that writes the run's files and prints (process 0; the only one when not distributed)."""
    import jax

    return jax.process_index() == 0


def global_mesh(num_envs: int):
    """A 1-D mesh named "env" over every process's devices; `num_envs` (the global count) must split evenly."""
    import jax
    from jax.sharding import Mesh

    from .ppo_core import ENV_AXIS

    devices = jax.devices()
    if num_envs % len(devices):
        raise UserError(
            f"--num-envs {num_envs} must be a multiple of the {len(devices)} devices of the "
            f"{jax.process_count()} processes: num_envs is the run's total, split evenly over every device"
        )
    return Mesh(np.asarray(devices), (ENV_AXIS,))


def host(tree):
    """Full numpy values of a pytree of (possibly multi-process) arrays, on every process.

    A multi-process array cannot be read with `np.asarray` where a process holds only part of it:
    `process_allgather` gathers it (every process must call this). On one process: `jax.device_get`.
    """
    import jax
    from jax.experimental import multihost_utils

    if jax.process_count() == 1:
        return jax.device_get(tree)
    return multihost_utils.process_allgather(tree, tiled=True)


def replicated(tree, mesh):
    """A pytree of host values, equal on every process, as arrays replicated over `mesh` (e.g. warm-start params)."""
    import jax
    from jax.experimental import multihost_utils
    from jax.sharding import PartitionSpec as P

    local = jax.tree.map(np.asarray, jax.device_get(tree))
    return multihost_utils.host_local_array_to_global_array(local, mesh, P())


def barrier(name: str) -> None:
    """Wait until every process gets here (a no-op on one process)."""
    import jax
    from jax.experimental import multihost_utils

    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def local_cpu_env(xla_flags: str = "") -> dict:
    """This process's environment for CPU children, without any cluster the machine advertises.

    SLURM, Open MPI or coordinator variables would make `jax.distributed` join that cluster
    instead of the localhost one `launch_local` sets up.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "JAX_COORDINATOR"))}
    return dict(env, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags)


def launch_local(argv: list[str], num_processes: int, log_dir: Path, env: dict | None = None, timeout_s: float = 600):
    """Run `jaxarena-train --distributed ARGV` as `num_processes` processes on this host; wait for them all.

    The localhost recipe of docs/distributed.md (on a CPU each process has one device): a free
    port for the coordinator, process i's output in `log_dir/i.out` and `i.err`. Returns each
    process's (exit status, stdout, stderr); any still running after `timeout_s` is killed (-9).
    """
    with socket.socket() as s:  # a port free now; the coordinator binds it a moment later
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    flags = ["--distributed", "--coordinator-address", f"localhost:{port}", "--num-processes", str(num_processes)]
    procs = []
    for i in range(num_processes):
        cmd = [sys.executable, "-m", "jaxarena.algorithms.train_loop", *flags, "--process-id", str(i), *argv]
        # To files, not pipes: a full pipe would block a process mid-collective and stall every other.
        with open(log_dir / f"{i}.out", "w") as out, open(log_dir / f"{i}.err", "w") as err:
            procs.append(subprocess.Popen(cmd, stdout=out, stderr=err, env=env))
    try:
        for p in procs:
            p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:  # only the processes started here, by their handles
            if p.poll() is None:
                p.kill()
                p.wait()
    return [
        (p.returncode, (log_dir / f"{i}.out").read_text(), (log_dir / f"{i}.err").read_text())
        for i, p in enumerate(procs)
    ]

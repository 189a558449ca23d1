"""The one training driver: a trainer run in chunks of jitted updates, checkpointed and resumable.

A trainer is a value: `init(keys) -> state` and `update(state, n) -> (state, metrics stacked over
the n updates)`, where `state.update` counts the updates done and `state.train_state.params` is
what it learns (`batch_runs.run_fns` gives the pair for one run, or for a batch of runs whose every
leaf leads with a run axis). PPO (one seed, or many seeds and settings in one program), the RL
selector and the learned bot all train through this module:

    state = restore(checkpointers, state, batched)     # where the runs saved last, when they have
    for state, metrics, n, seconds in chunks(update, state, total, chunk=10, checkpointers=..., batched=...):
        ...  # the caller's: per-update rows, loggers, collapse checks, progress

Each chunk is one compiled call, compiled once per length (the compile cache). After the caller has
taken a chunk's metrics, every run's full state is saved as one orbax checkpoint
(`checkpoint.Checkpointer`): after every `checkpoint_every`-th chunk, at every stop (the selector's
generations, the learned bot's checkpoints) and at the end. So a crash loses at most the unfinished
chunk, and the same command resumes every run from the newest update all of them saved.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.cli_errors import UserError


def updates_done(state) -> int:
    """The updates a run has done (the same for every run of a batch)."""
    return int(np.asarray(state.update).reshape(-1)[0])


def take(tree, i: int, batched: bool = True):
    """Run `i` of a batch (every leaf's row `i`); a single run as it is."""
    return jax.tree.map(lambda x: x[i], tree) if batched else tree


def stack(trees: Sequence):
    """Runs stacked into a batch along a new leading axis."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def chunks(
    update: Callable,
    state,
    total: int,
    *,
    chunk: int,
    checkpointers: Sequence = (),
    batched: bool = False,
    checkpoint_every: int = 1,
    stops: Sequence[int] = (),
    before: Callable | None = None,
    fetch: Callable = jax.device_get,
    say: Callable[[str], None] = print,
    label: str = "",
) -> Iterator[tuple]:
    """Yields (state, metrics on the host, n updates, seconds) after each chunk until `total` updates.

    A chunk never crosses a `stops` update; `before(state) -> state`, where given, runs before each
    chunk (the selector fills a learned bot's slot there). The checkpoints are saved when the caller asks for the
    next chunk, after it has logged this one: a row is never missing behind a saved checkpoint.
    `fetch` brings the metrics to the host (a multi-process run passes its collective).
    """
    run = jax.jit(update, static_argnums=1, donate_argnums=0)
    compiled: dict[int, Callable] = {}
    count = 0
    while (done := updates_done(state)) < total:
        if before is not None:
            state = before(state)
        n = min(chunk, total - done, *(s - done for s in stops if s > done))
        if n not in compiled:
            started = time.time()
            compiled[n] = run.lower(state, n).compile()
            say(f"compiled a {n}-update chunk{label} in {time.time() - started:.1f} s")
        started = time.time()
        state, metrics = compiled[n](state)
        metrics = fetch(metrics)
        seconds = time.time() - started
        count += 1
        yield state, metrics, n, seconds
        if checkpointers and (count % checkpoint_every == 0 or done + n >= total or done + n in stops):
            save(checkpointers, state, batched)


def save(checkpointers: Sequence, state, batched: bool) -> None:
    """Every run's state into its checkpointer (a batch is brought to the host once, then split)."""
    if not batched:
        checkpointers[0].save(state)  # as it lies: a sharded run saves each shard from its process
        return
    host = jax.device_get(state)
    for i, checkpointer in enumerate(checkpointers):
        checkpointer.save(take(host, i))


def restore(checkpointers: Sequence, template, batched: bool, start_over: str = "--fresh starts the run over"):
    """Every run's state at the newest update all of them saved, shaped (and stacked) like `template`.

    A run that saved a later update (a kill between two runs' saves) drops it, so the runs go on in
    step and the next save of that update is not refused. `start_over` is the error's hint.
    """
    common = set.intersection(*(set(c.all_steps()) for c in checkpointers))
    if not common:
        raise UserError(f"the runs' checkpoints share no update: {start_over}")
    step = max(common)
    try:
        restored = [c.restore(take(template, i, batched), step) for i, c in enumerate(checkpointers)]
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"cannot resume {checkpointers[0].run_dir}: its checkpoint does not match this version's training "
            f"state ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); {start_over}"
        ) from None
    for checkpointer in checkpointers:
        checkpointer.delete_after(step)
    return stack(restored) if batched else restored[0]

"""The training driver: chunks that stop where asked, checkpoints saved only after their rows, one restore."""

from __future__ import annotations

import json

import chex
import jax
import jax.numpy as jnp
import pytest
from flax import struct

from jaxarena.algorithms import driver
from jaxarena.algorithms.checkpoint import Checkpointer
from jaxarena.cli_errors import UserError


@struct.dataclass
class Counter:
    update: jax.Array
    total: jax.Array


def add(state: Counter, n: int):
    """n updates, each adding its own number to the total: (state, metrics stacked over the n)."""

    def one(s, _):
        s = s.replace(update=s.update + 1, total=s.total + s.update + 1)
        return s, {"update": s.update}

    return jax.lax.scan(one, state, None, n)


def fresh() -> Counter:
    return Counter(jnp.int32(0), jnp.float32(0.0))


def test_chunks_stop_at_every_stop_and_save_each_chunk_after_the_caller_took_it(tmp_path):
    checkpointer = Checkpointer(tmp_path, save_config=False)
    sizes, saved_when_taken = [], []
    steps = driver.chunks(add, fresh(), 10, chunk=4, checkpointers=[checkpointer], stops=[3], say=lambda _: None)
    for state, metrics, n, _ in steps:
        sizes.append(n)
        saved_when_taken.append(checkpointer.all_steps())
        assert list(metrics["update"]) == list(range(int(state.update) - n + 1, int(state.update) + 1))
    assert sizes == [3, 4, 3]  # the stop at 3 cuts the first chunk; the last is what is left
    assert saved_when_taken == [[], [3], [3, 7]]  # a chunk's checkpoint follows its rows, never precedes them
    assert checkpointer.all_steps() == [7, 10] and float(state.total) == 55.0  # the last two kept
    checkpointer.close()


def test_a_crash_while_logging_a_chunk_loses_that_chunk_only(tmp_path):
    checkpointer = Checkpointer(tmp_path, save_config=False)
    with pytest.raises(KeyboardInterrupt):
        for state, _, _, _ in driver.chunks(add, fresh(), 6, chunk=2, checkpointers=[checkpointer], say=print):
            if int(state.update) == 4:
                raise KeyboardInterrupt  # the caller dies before it has logged updates 3-4
    assert checkpointer.all_steps() == [2]
    resumed = driver.restore([checkpointer], fresh(), batched=False)
    chex.assert_trees_all_equal(resumed, Counter(jnp.int32(2), jnp.float32(3.0)))
    checkpointer.close()


def test_a_batch_resumes_where_every_run_saved_and_drops_a_later_lone_save(tmp_path):
    first, second = (Checkpointer(tmp_path / name, save_config=False) for name in ("a", "b"))
    two = driver.stack([fresh(), fresh()])
    state, _ = jax.vmap(lambda s: add(s, 2))(two)
    driver.save([first, second], state, batched=True)
    first.save(driver.take(jax.vmap(lambda s: add(s, 1))(state)[0], 0))  # killed between the two runs' saves
    assert first.all_steps() == [2, 3] and second.all_steps() == [2]
    resumed = driver.restore([first, second], two, batched=True)
    assert driver.updates_done(resumed) == 2 and first.all_steps() == [2]
    driver.save([first, second], jax.vmap(lambda s: add(s, 1))(resumed)[0], batched=True)  # update 3 again: saved
    assert first.all_steps() == second.all_steps() == [2, 3]
    for checkpointer in (first, second):
        checkpointer.close()
    empty = Checkpointer(tmp_path / "c", save_config=False)
    with pytest.raises(UserError, match="share no update: use a new --out"):
        driver.restore([first, empty], two, batched=True, start_over="use a new --out")
    empty.close()


def test_the_learned_bot_and_the_selector_refuse_a_folder_they_cannot_resume(tmp_path):
    import jaxarena
    from jaxarena.algorithms.bot_training import train_bot
    from jaxarena.selector.train import SelectorConfig, train

    old = tmp_path / "selector"
    old.mkdir()
    (old / "selector.msgpack").write_bytes(b"")
    with pytest.raises(ValueError, match="earlier version"):
        train(SelectorConfig(), old, progress=False)
    bot = tmp_path / "bot"
    bot.mkdir()
    (bot / "run.json").write_text(json.dumps({"total_steps": 1}))
    _, params = jaxarena.make("Arena-v0", episode_s=5.0)
    squad = lambda p, obs, key: jnp.zeros(obs.shape[:-1], jnp.int32)  # noqa: E731
    with pytest.raises(ValueError, match="other settings"):
        train_bot(squad, None, params, jax.random.PRNGKey(0), 128, 2, out=bot)

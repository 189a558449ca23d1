"""The selector's training command: outputs, resume after a crash, loading by directory, CLI flags."""

import json

import jax
import numpy as np
import pytest

from jaxarena.algorithms.checkpoint import Checkpointer, load_saved_params
from jaxarena.selector.inputs import CANDIDATE_SIZE, STATE_SIZE, SelectorObs
from jaxarena.selector.train import SelectorConfig, load_selector, parse_args, train

TINY = dict(num_envs=16, num_steps=4, total_decisions=16 * 4 * 4, chunk_updates=2, learned_slots=0)


def test_config_and_cli_flags():
    config, args = parse_args(["--out", "x", "--deduction", "false", "--total-decisions", "1e4", "--style", "vanilla"])
    assert config.deduction is False and config.total_decisions == 10_000 and config.style == "vanilla"
    assert args.out == "x"
    for bad in ({"population": "everyone"}, {"scenario": "moon"}, {"style": "x"}, {"num_envs": 0}):
        with pytest.raises(ValueError):
            SelectorConfig(**bad)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_train_writes_everything_and_resumes_after_a_crash(tmp_path, monkeypatch):
    config = SelectorConfig(**TINY)
    out = tmp_path / "run"
    real_save, saves = Checkpointer.save, []

    def crash_after_first_chunk(self, state):
        step = real_save(self, state)
        saves.append(step)
        if len(saves) == 1:
            raise KeyboardInterrupt("simulated crash")
        return step

    monkeypatch.setattr(Checkpointer, "save", crash_after_first_chunk)
    with pytest.raises(KeyboardInterrupt):
        train(config, out, progress=False)
    first_rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in first_rows] == [1, 2]
    last = train(config, out, progress=False)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3, 4]  # nothing redone, nothing missing
    assert rows[:2] == first_rows
    assert saves == [2, 4]
    assert last["update"] == 4 and (out / "curves.png").exists()
    assert rows[-1]["decisions_per_s"] > 0 and rows[-1]["env_steps_per_s"] > rows[-1]["decisions_per_s"]
    with pytest.raises(ValueError, match="another config"):
        train(SelectorConfig(**{**TINY, "lr": 0.5}), out, progress=False)

    loaded_config, network, params = load_selector(out)
    assert loaded_config == config
    zeros = np.zeros((2, 3, CANDIDATE_SIZE), np.float32)
    obs = SelectorObs(np.zeros((2, STATE_SIZE), np.float32), zeros, np.ones((2, 3), bool))
    logits, value = network.apply(params, obs)
    assert logits.shape == (2, 3) and np.all(np.isfinite(np.asarray(value)))


def test_load_selector_names_the_shipped_ones():
    with pytest.raises(FileNotFoundError, match="shipped selectors"):
        load_selector("no-such-selector")


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_learned_bot_checkpoints_join_the_population_by_generation(tmp_path):
    import orbax.checkpoint as ocp

    from jaxarena.names import BOT_LEARNED

    config = SelectorConfig(**{**TINY, "learned_slots": 2, "bot_steps": 4096, "chunk_updates": 1})
    out = tmp_path / "run"
    train(config, out, progress=False)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # Four updates in two generations: the second checkpoint joins before update 3.
    assert [r["learned_bots"] for r in rows] == [1, 1, 2, 2]
    checkpointer = Checkpointer(out, None, save_config=False)
    manager = checkpointer._mngr
    saved = manager.restore(4, args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
    checkpointer.close()
    population = saved["env_state"]["population"]
    weights = np.asarray(population["weights"])
    np.testing.assert_array_equal(weights[np.asarray(population["params"]["bot_type"]) == BOT_LEARNED], 1.0)
    # The bot trained as a run of its own, through the same driver: both of its checkpoints kept, rows logged.
    bot_steps = Checkpointer(out / "bot", None, save_config=False).all_steps()
    assert len(bot_steps) == 2 and (out / "bot" / "metrics.jsonl").exists()
    first, second = (load_saved_params(out / "bot", step) for step in bot_steps)
    assert not np.allclose(*(np.concatenate([np.ravel(x) for x in jax.tree.leaves(p)]) for p in (first, second)))


@pytest.mark.slow  # two selector programs compiled, then a resume: over ~10 s on 2 cores
def test_seeds_train_in_one_program_each_as_alone_and_resume(tmp_path):
    config = SelectorConfig(**{**TINY, "seed": 3})
    out = tmp_path / "runs"
    lasts = train(config, out, progress=False, seeds=2)
    assert [r["update"] for r in lasts] == [4, 4]
    assert json.loads((out / "seed_4" / "config.json").read_text())["seed"] == 4
    alone = train(SelectorConfig(**{**TINY, "seed": 4}), tmp_path / "alone", progress=False)
    _, _, batch_params = load_selector(out / "seed_4")
    _, _, alone_params = load_selector(tmp_path / "alone")
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), batch_params, alone_params))
    assert max(diffs) < 1e-4
    assert alone["update"] == 4
    _, _, other = load_selector(out / "seed_3")
    assert max(jax.tree.leaves(jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), batch_params, other))) > 1e-3
    # A longer budget resumes both seeds where they stopped.
    longer = SelectorConfig(**{**TINY, "seed": 3, "total_decisions": 16 * 4 * 6})
    with pytest.raises(ValueError, match="another config"):
        train(longer, out, progress=False, seeds=2)  # the budget is part of the config: refused, as for one seed
    import shutil

    shutil.rmtree(out / "seed_3" / "checkpoints")
    with pytest.raises(ValueError, match="checkpoints of 1 of these 2 seeds"):
        train(config, out, progress=False, seeds=2)

"""Training the learned bot: checkpoints the arena can play, and a bot that gets better."""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.algorithms.bot_training import DEFAULT_CONFIG, BotActorCritic, actor_weights, evaluate_bot, train_bot
from jaxarena.learned_bot import BOT_OBS_SIZE, NUM_BOT_ACTIONS, bot_logits, init_bot_weights
from jaxarena.names import BOT_LEARNED, MELEE

SMALL = dataclasses.replace(DEFAULT_CONFIG, num_steps=32)


def statue(params, obs, key):
    """A squad that stands where it spawned and strikes only what comes into reach."""
    return jnp.full(obs.shape[:-1], MELEE, jnp.int32)


def test_network_actor_is_the_arena_bot():
    net = BotActorCritic(hidden=16)
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, BOT_OBS_SIZE)))
    obs = jax.random.normal(jax.random.PRNGKey(1), (7, BOT_OBS_SIZE))
    logits, value = net.apply(params, obs)
    chex.assert_shape(logits, (7, NUM_BOT_ACTIONS))
    chex.assert_shape(value, (7,))
    chex.assert_trees_all_close(logits, bot_logits(actor_weights(params), obs))
    chex.assert_trees_all_equal_structs(actor_weights(params), init_bot_weights(jax.random.PRNGKey(0), 16))


def test_train_bot_returns_playable_checkpoints_oldest_first():
    _, params = jaxarena.make("Arena-v0", episode_s=5.0)
    config = dataclasses.replace(SMALL, num_steps=8, num_minibatches=2, update_epochs=1)
    per_update = 8 * 8
    checkpoints, metrics = train_bot(
        statue, None, params, jax.random.PRNGKey(0), 3 * per_update, 8, per_update, config=config, hidden=16
    )
    assert len(checkpoints) == 3
    np.testing.assert_array_equal(metrics["update"], [1, 2, 3])
    np.testing.assert_array_equal(metrics["env_steps"], [64, 128, 192])
    np.testing.assert_array_equal(metrics["checkpoint_env_steps"], [64, 128, 192])
    for key in ("bot_win", "npc_win", "timeout", "damage_dealt", "damage_taken", "episode_return", "entropy"):
        assert metrics[key].shape == (3,)
    assert np.all(np.isfinite(metrics["entropy"]))
    # Each checkpoint is a bot the arena plays (make checks it), and training moved the weights.
    for weights in checkpoints:
        _, p = jaxarena.make("Arena-v0", bot="learned", bot_weights=weights)
        assert int(p.bot_type) == BOT_LEARNED
    assert not np.allclose(checkpoints[0].w2, checkpoints[-1].w2)
    with pytest.raises(ValueError, match="num_envs"):
        train_bot(statue, None, params, jax.random.PRNGKey(0), 100, 0, config=config)


def test_train_bot_vmaps_over_a_batch_of_seeds():
    _, params = jaxarena.make("Arena-v0", episode_s=5.0)
    config = dataclasses.replace(SMALL, num_steps=8, num_minibatches=2, update_epochs=1)
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    args = (statue, None, params)
    checkpoints, metrics = train_bot(*args, keys, 2 * 64, 8, 64, config=config, hidden=16)
    assert len(checkpoints) == 2
    chex.assert_shape(checkpoints[-1].w2, (2, *init_bot_weights(jax.random.PRNGKey(0), 16).w2.shape))
    chex.assert_shape(metrics["entropy"], (2, 2))
    np.testing.assert_array_equal(metrics["env_steps"], [[64, 128], [64, 128]])
    for i in range(2):  # seed i of the batch is the run from keys[i] alone, to float tolerance
        alone, alone_metrics = train_bot(*args, keys[i], 2 * 64, 8, 64, config=config, hidden=16)
        chex.assert_trees_all_close(jax.tree.map(lambda x, i=i: x[i], checkpoints[-1]), alone[-1], atol=1e-4)
        np.testing.assert_allclose(metrics["entropy"][i], alone_metrics["entropy"], atol=1e-4)
    assert not np.allclose(checkpoints[-1].w2[0], checkpoints[-1].w2[1])


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_bot_learns_to_find_and_beat_a_standing_squad():
    # A squad that never moves and cannot hurt: a bot moving at random almost never reaches it.
    _, params = jaxarena.make("Arena-v0", episode_s=30.0, npc_melee_damage=0.0)
    checkpoints, metrics = train_bot(statue, None, params, jax.random.PRNGKey(2), 100_000, 32, config=SMALL)
    before = evaluate_bot(init_bot_weights(jax.random.PRNGKey(9)), statue, None, params, jax.random.PRNGKey(7), 64)
    after = evaluate_bot(checkpoints[-1], statue, None, params, jax.random.PRNGKey(7), 64)
    assert before["squad_damage_taken"] < 20.0
    assert after["squad_damage_taken"] > before["squad_damage_taken"] + 100.0
    returns = metrics["episode_return"]
    assert np.nanmean(returns[-5:]) > np.nanmean(returns[:5]) + 0.3


@pytest.mark.slow
def test_bot_learns_against_the_paper_recipe_b_on_headroom():
    from jaxarena.algorithms.checkpoint import load_policy

    squad, squad_params = load_policy("B-paper")  # the squad docs/arena.md measured the learned bot against
    _, params = jaxarena.make("Arena-v0", scenario="headroom")
    checkpoints, _ = train_bot(squad, squad_params, params, jax.random.PRNGKey(1), 400_000, 64)
    before = evaluate_bot(init_bot_weights(jax.random.PRNGKey(9)), squad, squad_params, params, jax.random.PRNGKey(7))
    after = evaluate_bot(checkpoints[-1], squad, squad_params, params, jax.random.PRNGKey(7))
    assert after["squad_damage_taken"] > before["squad_damage_taken"] + 10.0


def test_train_bot_with_a_folder_resumes_where_it_stopped(tmp_path, monkeypatch):
    from jaxarena.algorithms.checkpoint import Checkpointer

    _, params = jaxarena.make("Arena-v0", episode_s=5.0)
    config = dataclasses.replace(SMALL, num_steps=8, num_minibatches=2, update_epochs=1)
    args = (statue, None, params, jax.random.PRNGKey(0), 3 * 64, 8, 64)
    alone, alone_metrics = train_bot(*args, config=config, hidden=16)
    real_save = Checkpointer.save

    def crash_after_the_first_checkpoint(self, state):
        real_save(self, state)
        raise KeyboardInterrupt("simulated crash")

    monkeypatch.setattr(Checkpointer, "save", crash_after_the_first_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        train_bot(*args, config=config, hidden=16, out=tmp_path / "bot")
    monkeypatch.setattr(Checkpointer, "save", real_save)
    resumed, metrics = train_bot(*args, config=config, hidden=16, out=tmp_path / "bot")
    # The interrupted run went on from its first checkpoint: the same bots and rows as one that never stopped.
    chex.assert_trees_all_close(resumed, alone, atol=1e-6)
    np.testing.assert_array_equal(metrics["update"], [1, 2, 3])
    np.testing.assert_allclose(metrics["entropy"], alone_metrics["entropy"], rtol=1e-5)
    again, _ = train_bot(*args, config=config, hidden=16, out=tmp_path / "bot")  # finished: read back, not retrained
    chex.assert_trees_all_equal(again, resumed)

"""The squad with memory: a GRU in the PPO core, carried through rollouts, minibatches, checkpoints and play."""

from __future__ import annotations

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.algorithms import PPOConfig, make_trainer
from jaxarena.algorithms.checkpoint import load_policy, make_policy
from jaxarena.algorithms.memory import first_steps, reset_where
from jaxarena.algorithms.networks import RecurrentActorCritic, init_params
from jaxarena.algorithms.train_loop import main as train_main
from jaxarena.bot_arena import BotArena
from jaxarena.names import MOVE_TO_BOT, STRAFE_LEFT
from jaxarena.policies import with_memory
from jaxarena.runner import make_runner

# `brute`'s hits end episodes and kill NPCs within a few dozen ticks, so a rollout crosses resets.
TINY = PPOConfig(
    scenario="brute",
    bots=("aggressive", "balanced"),
    num_envs=4,
    num_steps=48,
    total_timesteps=4 * 48 * 3,
    update_epochs=2,
    num_minibatches=4,
    hidden=16,
    memory=8,
)


def test_the_update_replays_each_rollout_exactly_across_episode_ends():
    # With lr 0 the network never moves, so re-running it over each NPC's sequence from the memory the
    # rollout started with must give the rollout's own log-probabilities: a ratio of exactly 1. A
    # memory reset missed or put at the wrong step (an episode's end, a death) breaks that at once.
    trainer = make_trainer(TINY.replace(lr=0.0), mesh=None)
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    chex.assert_shape(state.memory, (4, 5, 8))
    state, metrics = jax.jit(trainer.run_updates, static_argnums=1)(state, 3)
    assert int(np.sum(metrics["episodes"])) > 0, "no episode ended: the test would not cross a reset"
    np.testing.assert_array_equal(np.asarray(metrics["approx_kl"]), 0.0)
    np.testing.assert_array_equal(np.asarray(metrics["clip_frac"]), 0.0)
    assert float(jnp.abs(state.memory).max()) > 0.0  # the memory was used, not left at zeros


def test_it_learns_a_memory_that_changes_its_actions():
    trainer = make_trainer(TINY, mesh=None)
    state, metrics = jax.jit(trainer.run_updates, static_argnums=1)(jax.jit(trainer.init)(jax.random.PRNGKey(1)), 3)
    chex.assert_tree_all_finite(metrics["total_loss"])
    assert float(metrics["approx_kl"][-1]) > 0.0  # lr > 0: the policy moved
    policy = make_policy(TINY, greedy=True)
    obs = jnp.zeros((5, jaxarena.make("Arena-v0")[0].obs_size))
    params = state.train_state.params
    memory = policy.initial_memory((5,))
    logits = [RecurrentActorCritic(**TINY.network_kwargs()).apply(params, m, obs)[1] for m in (memory, memory + 1.0)]
    assert not np.allclose(logits[0], logits[1])  # the same observation reads differently with another memory


def test_memory_resets_where_a_trajectory_ended_and_replays_from_there():
    memory = jnp.ones((3, 2, 4))
    ended = jnp.array([[True, False], [False, False], [False, True]])
    reset = reset_where(memory, ended)
    np.testing.assert_array_equal(reset[:, :, 0], ~ended)
    end = jnp.array([[False], [True], [False], [True]])
    np.testing.assert_array_equal(first_steps(end)[:, 0], [False, False, True, False])


def _counting_policy(params, obs, key, memory):
    """Walks in for its first 3 ticks, then strafes: its actions depend on the memory alone."""
    actions = jnp.where(memory < 3, MOVE_TO_BOT, STRAFE_LEFT).astype(jnp.int32)
    return actions, memory + 1


_counting_policy.initial_memory = lambda batch_shape: jnp.zeros(batch_shape, jnp.int32)


def test_the_runner_carries_each_episodes_memory_from_tick_to_tick():
    env, params = jaxarena.make("Arena-v0", bot="evasive")
    run = make_runner(env, params, _counting_policy, 0, 3, num_periods=1, trace=lambda tick: tick.actions)
    actions = np.asarray(run(None, params, jax.random.PRNGKey(0)).trace)  # (ticks, episodes, 5)
    assert (actions[:3] == MOVE_TO_BOT).all() and (actions[3:] == STRAFE_LEFT).all()


def test_a_policy_without_memory_plays_as_before():
    initial, step = with_memory(lambda params, obs, key: jnp.zeros(obs.shape[:-1], jnp.int32))
    assert initial((2, 5)) == ()
    actions, memory = step(None, jnp.zeros((5, 23)), None, ())
    chex.assert_shape(actions, (5,))
    assert memory == ()


def test_memory_settings_that_cannot_train_are_refused():
    with pytest.raises(ValueError, match="tag_experts"):
        TINY.replace(combination="B", tag_experts=True)
    with pytest.raises(ValueError, match="num_minibatches 3 must divide"):
        TINY.replace(num_minibatches=3, num_steps=48)
    with pytest.raises(ValueError, match="memory must be"):
        TINY.replace(memory=-1)
    policy = make_policy(TINY)
    params = init_params(RecurrentActorCritic(**TINY.network_kwargs()), jax.random.PRNGKey(0), 23)
    with pytest.raises(ValueError, match="this squad has memory"):
        policy(params, jnp.zeros((5, 23)), jax.random.PRNGKey(0))
    _, env_params = jaxarena.make("Arena-v0")
    with pytest.raises(ValueError, match="plays squads without memory"):
        BotArena(policy, params, env_params, 2)


@pytest.mark.slow  # two seeds trained in one program, their held-out play and a resume: ~40 s on 2 cores
def test_train_command_trains_seeds_with_memory_in_one_program_and_they_play(tmp_path, capsys):
    out = tmp_path / "gru"
    argv = ["--out", str(out), "--seeds", "2", "--scenario", "brute", "--total-steps", "1536", "--num-envs", "4"]
    argv += ["--num-steps", "48", "--hidden", "16", "--set", "memory=8", "num_minibatches=4", "--eval-episodes", "8"]
    assert train_main(argv + ["--no-progress", "--chunk", "2"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [r["seed"] for r in summary["runs"]] == [0, 1]
    policy, params = load_policy(out / "seed_1")
    assert hasattr(policy, "initial_memory")
    env, env_params = jaxarena.make("Arena-v0", scenario="brute")
    result = make_runner(env, env_params, policy, 0, 4)(params, env_params, jax.random.PRNGKey(0))
    assert set(np.asarray(result.outcome).tolist()) <= {1, 2, 3}
    # Longer: the same command resumes both seeds from their checkpoints (the memory restored with them).
    assert train_main([*argv[:7], "3072", *argv[8:], "--no-progress", "--chunk", "2"]) == 0
    assert "resumed 2 runs at update 8/16" in capsys.readouterr().out

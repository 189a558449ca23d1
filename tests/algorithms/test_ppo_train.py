"""End-to-end PPO: it learns, checkpoints round-trip, resumed == uninterrupted, policies load."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxarena.algorithms import PPOConfig, make_trainer
from jaxarena.algorithms.checkpoint import Checkpointer, export_policy, load_policy, make_policy
from jaxarena.algorithms.evaluation import run_episodes
from jaxarena.algorithms.networks import ActorCritic

TINY = PPOConfig(
    combination="B",
    bots=("aggressive", "evasive", "balanced"),
    num_envs=6,
    num_steps=16,
    total_timesteps=6 * 16 * 8,
    update_epochs=2,
    num_minibatches=2,
    hidden=16,
)


@pytest.fixture(scope="module")
def tiny():
    trainer = make_trainer(TINY, mesh=None)
    run = jax.jit(trainer.run_updates, static_argnums=1)
    rs0 = jax.jit(trainer.init)(jax.random.PRNGKey(3))
    # Every test reuses these two compiled lengths (2 and 4 updates).
    return trainer, run, rs0, run(rs0, 2)


def test_metrics_are_finite_and_shaped(tiny):
    _trainer, _run, _rs0, (rs, m) = tiny
    assert int(rs.update) == 2
    for key in ("total_loss", "value_loss", "actor_loss", "entropy", "approx_kl", "reward_mean"):
        chex.assert_shape(m[key], (2,))
        chex.assert_tree_all_finite(m[key])
    chex.assert_shape(m["episodes_per_bot"], (2, 3))
    # Entropy of a near-uniform initial policy over 6 actions.
    assert 1.6 < float(m["entropy"][0]) <= np.log(6) + 1e-5
    np.testing.assert_array_equal(m["env_steps"], [TINY.steps_per_update, 2 * TINY.steps_per_update])


def test_recipe_b_draws_tags_and_writes_them_into_obs(tiny):
    _, _run, rs0, (rs, _) = tiny
    for state in (rs0, rs):
        tags = np.asarray(state.log_state.env_state.tag)
        np.testing.assert_allclose(np.asarray(state.obs)[:, :, 22], np.repeat(tags[:, None] / 3.0, 5, 1), atol=1e-6)
    assert len(set(np.asarray(rs0.log_state.env_state.tag).tolist())) > 1  # 6 uniform draws, seeded: not all equal


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_frozen_tag_experts_keep_their_weights_and_the_others_learn():
    # Tags redrawn every 4 ticks, so every expert acts in the 16-tick rollouts.
    config = TINY.replace(tag_experts=True, frozen_tags=(1,), recipe="obey", shaping_weight=4.0, tag_period_ticks=4)
    trainer = make_trainer(config, mesh=None)
    rs0 = jax.jit(trainer.init)(jax.random.PRNGKey(1))
    rs, _ = jax.jit(trainer.run_updates, static_argnums=1)(rs0, 2)
    before, after = rs0.train_state.params["params"], rs.train_state.params["params"]
    for name in before:
        moved = not all(
            np.array_equal(a, b)
            for a, b in zip(jax.tree.leaves(before[name]), jax.tree.leaves(after[name]), strict=True)
        )
        frozen = name in {
            "expert_actor_layers_2",
            "expert_actor_layers_3",
            "expert_actor_out_1",
            "expert_critic_layers_2",
            "expert_critic_layers_3",
            "expert_critic_out_1",
        }
        assert moved != frozen, name
    with pytest.raises(ValueError, match="frozen_tags needs tag_experts"):
        TINY.replace(frozen_tags=(1,))
    with pytest.raises(ValueError, match="frozen_tags must be tags"):
        TINY.replace(tag_experts=True, frozen_tags=(4,))
    with pytest.raises(ValueError, match="fresh_tags needs tag_experts=true and --init-from"):
        TINY.replace(tag_experts=True, fresh_tags=(3,))
    for frozen, tags in (((3,), (0, 1, 2, 3)), ((), (0, 1, 2))):  # a fresh expert must be one that trains
        with pytest.raises(ValueError, match="fresh_tags must be trained tags"):
            TINY.replace(tag_experts=True, init_from="B", frozen_tags=frozen, tags=tags, fresh_tags=(3,))


@pytest.mark.parametrize("bad", [0, -1])
def test_a_config_of_no_env_steps_is_refused(bad):
    # num_updates is at least 1: without the check a run of no env steps would still train one update.
    with pytest.raises(ValueError, match=f"total_timesteps must be >= 1, got {bad}"):
        TINY.replace(total_timesteps=bad)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_recipe_b_draws_only_from_its_tags_on_the_facing_arena():
    config = TINY.replace(tags=(2, 3), env_id="ArenaFacing-v0", tag_period_ticks=4)
    trainer = make_trainer(config, mesh=None)
    rs = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    seen = set()
    for _ in range(3):  # 16-tick rollouts, tags redrawn every 4 ticks
        rs, metrics = jax.jit(trainer.run_updates, static_argnums=1)(rs, 1)
        seen |= set(np.asarray(rs.log_state.env_state.tag).tolist())
        obs = np.asarray(rs.obs)
        chex.assert_shape(obs, (6, 5, 25))
        np.testing.assert_allclose(
            obs[..., 23:], np.repeat(np.asarray(rs.log_state.env_state.bot_facing)[:, None], 5, 1)
        )
    assert seen == {2, 3}
    chex.assert_tree_all_finite(metrics["total_loss"])
    with pytest.raises(ValueError, match="tags"):
        TINY.replace(tags=(4,))
    with pytest.raises(ValueError, match="env_id"):
        TINY.replace(env_id="Arena-v1")


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_checkpoint_resume_equals_uninterrupted(tiny, tmp_path):
    trainer, run, rs0, (half, _) = tiny
    straight, m_straight = run(rs0, 4)
    ckpt = Checkpointer(tmp_path / "run", TINY)
    assert ckpt.save(half) == 2
    ckpt.close()
    # A fresh process would rebuild the template from init; restore into it.
    template = jax.jit(trainer.init)(jax.random.PRNGKey(999))
    restored = Checkpointer(tmp_path / "run", TINY).restore(template)
    chex.assert_trees_all_equal(restored, half)
    resumed, m_resumed = run(restored, 2)
    chex.assert_trees_all_equal(resumed.train_state.params, straight.train_state.params)
    chex.assert_trees_all_equal(resumed.train_state.opt_state, straight.train_state.opt_state)
    chex.assert_trees_all_equal(resumed.log_state, straight.log_state)
    np.testing.assert_array_equal(resumed.rng, straight.rng)
    np.testing.assert_array_equal(m_resumed["total_loss"], m_straight["total_loss"][2:])
    # Sanity: training moved the params, so equality above is not vacuous.
    moved = jax.tree.map(
        lambda a, b: float(jnp.max(jnp.abs(a - b))), straight.train_state.params, rs0.train_state.params
    )
    assert max(jax.tree.leaves(moved)) > 0


def test_load_policy_jitted_single_and_batched(tiny, tmp_path):
    _, _run, _rs0, (rs, _) = tiny
    Checkpointer(tmp_path / "run", TINY).save(rs)
    policy, params = load_policy(tmp_path / "run")
    chex.assert_trees_all_equal(params, rs.train_state.params)
    obs = jnp.asarray(rs.obs)  # (6, 5, 23)
    act = jax.jit(policy)(params, obs[0], jax.random.PRNGKey(0))
    chex.assert_shape(act, (5,))
    assert act.dtype == jnp.int32
    batched = jax.jit(policy)(params, obs, jax.random.PRNGKey(0))
    chex.assert_shape(batched, (6, 5))
    assert np.all((np.asarray(batched) >= 0) & (np.asarray(batched) < 6))

    greedy, params = load_policy(tmp_path / "run", greedy=True)
    logits = ActorCritic(**TINY.network_kwargs()).apply(params, obs, method="logits")
    np.testing.assert_array_equal(jax.jit(greedy)(params, obs), np.argmax(np.asarray(logits), -1))

    # An exported, policy-only directory loads the same way.
    export_policy(tmp_path / "exported", params, TINY)
    _, params2 = load_policy(tmp_path / "exported")
    chex.assert_trees_all_equal(params, params2)
    with pytest.raises(FileNotFoundError):
        load_policy(tmp_path / "nowhere")


@pytest.mark.slow  # ~20 s on 2 cores: four small programs to compile
def test_timeout_is_terminal_changes_the_update_only_when_a_timeout_falls_in_the_rollout():
    """A timeout bootstraps from V(final_obs) by default; `timeout_is_terminal` makes it worth 0.

    On `raid` an episode times out after 480 ticks. A 484-tick rollout holds a timeout in every
    arena that was not decided earlier, so the two settings must give different parameters; a 16-tick
    rollout holds none, so they must give the same ones, bit for bit.
    """
    base = TINY.replace(combination="A", scenario="raid", bots=("evasive",), num_envs=2, update_epochs=1)

    def one_update(num_steps, timeout_is_terminal):
        config = base.replace(
            num_steps=num_steps, total_timesteps=2 * num_steps, timeout_is_terminal=timeout_is_terminal
        )
        trainer = make_trainer(config, mesh=None)
        runner, metrics = jax.jit(trainer.run_updates, static_argnums=1)(trainer.init(jax.random.PRNGKey(0)), 1)
        return runner.train_state.params, metrics

    (bootstrapped, m), (terminal, _) = one_update(484, False), one_update(484, True)
    assert int(m["timeouts"][0]) > 0, "no timeout in the long rollout: the test would prove nothing"
    with pytest.raises(AssertionError):
        chex.assert_trees_all_equal(bootstrapped, terminal)
    chex.assert_trees_all_equal(one_update(16, False)[0], one_update(16, True)[0])


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_tiny_training_run_learns():
    """A seeded ~100k-step Combination A run vs the aggressive bot: the return rises.

    The same 64 seeded evaluation episodes are played by the initial and the
    trained policy: the trained squad wins more and kills sooner (the undiscounted
    return saturates at 2 = damage 1 + kill 1, so the win rate, the return and
    the time to kill are all checked). Also checks that recipe A keeps tag 0.
    """
    cfg = PPOConfig(
        combination="A",
        bots=("aggressive",),
        num_envs=32,
        num_steps=128,
        total_timesteps=32 * 128 * 25,
        update_epochs=4,
        num_minibatches=4,
        hidden=32,
        lr=1e-3,
        seed=0,
    )
    trainer = make_trainer(cfg, mesh=None)
    rs0 = trainer.init(jax.random.PRNGKey(cfg.seed))
    rs, m = jax.jit(trainer.run_updates, static_argnums=1)(rs0, cfg.num_updates)
    policy = make_policy(cfg)
    res = {}
    for name, params in (("init", rs0.train_state.params), ("trained", rs.train_state.params)):
        r = run_episodes(policy, params, "aggressive", n=64, seed=11, shaping_weight=0.0)
        res[name] = (r["episode_return"].mean(), np.mean(r["outcome"] == 1), r["episode_time"].mean())
    (ret0, win0, time0), (ret1, win1, time1) = res["init"], res["trained"]
    assert ret1 > ret0 + 0.05, res
    assert win1 > win0, res
    assert time1 < 0.95 * time0, res
    assert float(m["entropy"][-1]) < float(m["entropy"][0])
    assert not np.any(np.asarray(rs.log_state.env_state.tag))
    assert not np.any(np.asarray(rs.obs)[:, :, 22])

"""The coder's reward (`jaxarena.coder.scoring`): -1, -0.5 and the win rate, batched and paired.

Episode counts are tiny here; the CLI's default is 1,000 per bot.
"""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.coder.batch_rollout import episode_keys, make_batch_scorer
from jaxarena.coder.score_types import NO_CODE, PROGRAM_ERROR, ScoreConfig
from jaxarena.coder.scoring import score_policies, score_replies, score_sources
from jaxarena.coder.translate import translate
from jaxarena.names import NPC_WIN, bot_index
from jaxarena.runner import make_runner

RUSH = "def policy(obs):\n    if obs.bot.can_attack:\n        return MELEE\n    return MOVE_TO_BOT\n"
KITE = (
    "def policy(obs):\n"
    "    if obs.bot.distance < 6:\n        return RETREAT\n"
    "    if obs.bot.distance > 11:\n        return MOVE_TO_BOT\n"
    "    return RANGED if random() < 0.8 else MOVE_TO_BOT\n"
)
# Short episodes (the aggressive bot comes to the squad), more jobs than lanes (lanes are refilled).
QUICK = ScoreConfig(episodes_per_bot=6, bots=("aggressive",), lanes=4, seed=3)


def test_rewards_of_no_code_a_failing_program_and_a_program_that_plays():
    scores = score_replies(
        [
            "I would rush.",
            "```python\ndef policy(obs):\n    while True:\n        return MELEE\n```",
            f"```python\n{RUSH}```",
        ],
        QUICK,
    )
    assert [s.status for s in scores] == ["no_code", "error", "ok"]
    assert scores[0].reward == NO_CODE == -1.0
    assert scores[1].reward == PROGRAM_ERROR == -0.5
    assert scores[1].error_line == 2 and "while" in scores[1].error and scores[1].error.startswith("line 2:")
    ok = scores[2]
    assert ok.reward == pytest.approx(np.mean(list(ok.win_rate.values())))
    assert set(ok.win_rate) == {"aggressive"} and ok.episodes_per_bot == 6
    stats = ok.stats["aggressive"]
    assert stats["win"] + stats["loss"] + stats["timeout"] == pytest.approx(1.0)
    assert sum(stats["action_share"].values()) == pytest.approx(1.0)
    # The rush squad only ever walks in or strikes.
    assert stats["action_share"]["melee"] > 0 and stats["action_share"]["move_to_bot"] > 0
    assert stats["action_share"]["ranged"] == 0 and stats["action_share"]["retreat"] == 0
    assert stats["damage_dealt"] > 0 and 0 < stats["episode_s"] <= 120


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
@pytest.mark.parametrize("lanes, episodes", [(16, 12), (256, 72)])
def test_chunks_lane_refills_and_the_tail_change_no_episode(lanes, episodes):
    """Lanes refilled every 2 s play each job exactly as a lane of its own does in one 120 s chunk.

    With 256 lanes the last 64 busy ones move to a smaller set once the queue is empty (the tail).
    Lane counts are multiples of 16, so every run uses the same vector code.
    """
    from jaxarena.coder.lanes import arena_programs

    policies = [translate(RUSH), translate(KITE)]
    config = ScoreConfig(episodes_per_bot=episodes, bots=("balanced", "aggressive"), lanes=lanes, seed=5, chunk_s=2.0)
    fn, jobs = make_batch_scorer(policies, config)
    results = jax.device_get(fn())
    whole = dataclasses.replace(config, lanes=len(jobs["cand"]), chunk_s=120.0)  # no refill, no tail
    alone, alone_jobs = make_batch_scorer(policies, whole)
    reference = jax.device_get(alone())
    np.testing.assert_array_equal(jobs["cand"], alone_jobs["cand"])
    for name in ("outcome", "t", "damage_dealt", "damage_taken", "counts", "invalid"):
        np.testing.assert_array_equal(results[name], reference[name], err_msg=name)
    assert len(set(results["outcome"].tolist())) > 1  # wins and other outcomes: a real comparison
    if lanes == 256:  # the tail's arena has run (jit's cache holds its compiled tick)
        assert arena_programs("paper", 64).tick._cache_size() == 1


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_every_episode_is_the_one_episode_runners_to_rounding():
    """The scorer's arena is `BatchedArena`: the runner's spawn and policy keys, its float order to rounding.

    20 ticks from the runner's spawn, every lane's state matches the runner's to rounding (a frozen
    tick counter or a wrong key would not). Whole episodes then follow it until rounding differences
    grow, and a chaotic game can end differently: most outcomes and lengths must still match.
    """
    from jaxarena.batched import batch_first
    from jaxarena.coder.lanes import arena_programs, policy_program

    policies = [translate(RUSH), translate(KITE)]
    env, params = jaxarena.make("Arena-v0", decision_period_s=2.0)
    cand = np.asarray([0, 1] * 8, np.int32)
    bot = np.asarray([0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2, 0, 1, 2, 1], np.int32)
    job_keys = episode_keys(5, 0, 16)
    runner_keys = jax.vmap(lambda k: jax.random.split(k, 1)[0])(job_keys)
    raw_keys = jax.random.key_data(runner_keys)  # what the lanes' programs take
    arena, policy = arena_programs("paper", 16), policy_program(policies)
    lanes = arena.restart(arena.empty(), np.ones(16, bool), bot, raw_keys)
    for _ in range(20):
        lanes = arena.tick(lanes, policy(jnp.asarray(cand), lanes["obs"], raw_keys, lanes["state"].t))
    runs = [make_runner(env, params, p, 0, 1, num_periods=1) for p in policies]
    lane_jobs = zip(cand, bot, job_keys, strict=True)
    finals = [runs[c](None, params.replace(bot_type=int(b)), k).final_state for c, b, k in lane_jobs]
    reference = jax.tree.map(lambda *x: jnp.concatenate(x), *finals)
    chex.assert_trees_all_close(batch_first(lanes["state"]), reference, rtol=1e-4, atol=1e-3)
    assert int(jnp.min(reference.t)) == 20  # no episode ended: every tick was compared

    config = ScoreConfig(episodes_per_bot=8, bots=("aggressive", "balanced"), lanes=32, seed=5, chunk_s=2.0)
    fn, jobs = make_batch_scorer(policies, config)
    results = jax.device_get(fn())
    same, total = 0, 0
    for c, policy in enumerate(policies):
        run = make_runner(env, params, policy, 0, 1)
        for name in config.bots:
            b = bot_index(name)
            keys = episode_keys(config.seed, b, config.episodes_per_bot)
            ref = jax.device_get(jax.vmap(lambda k, b=b, run=run: run(None, params.replace(bot_type=b), k))(keys))
            sel = np.nonzero((jobs["cand"] == c) & (jobs["bot"] == b))[0]  # in episode order
            same += int(np.sum(results["outcome"][sel] == ref.outcome[:, 0]))
            same += int(np.sum(np.abs(results["t"][sel] * 0.1 - ref.duration_s[:, 0]) < 0.05))
            total += 2 * len(sel)
    assert same >= 0.75 * total, f"only {same} of {total} outcomes and lengths match the runner's"


def test_a_lane_starts_as_the_runners_episode():
    """A lane's spawn is the runner's reset on the job's key (to an fma's last bit); its policy keys the runner's."""
    from jaxarena.batched import batch_first
    from jaxarena.coder.lanes import arena_programs, policy_program

    arena = arena_programs("paper", 4)
    runner_keys = jax.random.split(jax.random.key(3), 4)
    bot_type = np.asarray([0, 1, 2, 1], np.int32)
    raw_keys = jax.random.key_data(runner_keys)  # what the lanes' programs take
    lanes = arena.restart(arena.empty(), np.ones(4, bool), bot_type, raw_keys)
    env, params = jaxarena.make("Arena-v0", decision_period_s=1.0)
    reset = jax.vmap(lambda k, b: env.reset(jax.random.fold_in(k, 0), params.replace(bot_type=b)))
    obs, state = reset(runner_keys, jnp.asarray(bot_type))
    chex.assert_trees_all_close(batch_first(lanes["state"]), state, rtol=1e-6, atol=1e-5)
    chex.assert_trees_all_close(lanes["obs"], obs, rtol=1e-6, atol=1e-6)

    def noisy(params, obs, key):  # the key decides every action: a wrong key shows
        return jax.random.randint(key, obs.shape[:-1], 0, 6)

    actions = policy_program([noisy])(jnp.zeros(4, jnp.int32), lanes["obs"], raw_keys, lanes["state"].t)
    first_keys = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, 1))[0])(runner_keys)
    chex.assert_trees_all_equal(actions, jax.vmap(lambda o, k: noisy(None, o, k))(obs, first_keys))
    assert not np.array_equal(actions[0], actions[1])


def test_the_arena_is_compiled_once_for_every_batch():
    """Only the candidates' programs are compiled per batch: runners of one config share one compiled arena."""
    from jaxarena.coder import lanes

    config = ScoreConfig(episodes_per_bot=1, bots=("aggressive",), lanes=2, chunk_s=5.0)
    for policies in ([translate(RUSH)], [translate(KITE)], [translate(RUSH), translate(KITE)]):
        fn, _ = make_batch_scorer(policies, config)
        assert np.all(jax.device_get(fn())["outcome"] > 0)
    arena = lanes.arena_programs("paper", 2)
    assert arena.tick._cache_size() == 1 and arena.restart._cache_size() == 1
    assert lanes.arena_programs("paper", 2) is arena and lanes.arena_programs("raid", 2) is not arena


@pytest.mark.slow  # three arenas compiled: over ~10 s on 2 cores
def test_a_pool_plays_ahead_keeps_what_ended_and_carries_the_running_episodes_to_the_next_call(monkeypatch):
    """Lanes idle before the required jobs end take the next ones; a later call neither replays nor changes them.

    With a 16-lane tail (`MIN_TAIL_LANES` lowered), the second call hands out all its jobs, moves
    to the tail and may end there with episodes played ahead still running: the third call plays
    them again from the start, to the same result.
    """
    from jaxarena.coder import lanes
    from jaxarena.coder.batch_rollout import LanePool, _job_queue, lane_sets

    monkeypatch.setattr(lanes, "MIN_TAIL_LANES", 16)
    moves = []
    take_lanes = lanes.take_lanes
    monkeypatch.setattr(lanes, "take_lanes", lambda state, keep: moves.append(len(keep)) or take_lanes(state, keep))
    policies = [translate(RUSH), translate(KITE)]
    config = ScoreConfig(episodes_per_bot=48, bots=("aggressive", "balanced"), lanes=64, seed=5, chunk_s=2.0)
    assert lane_sets(config.lanes, 192) == [64, 16]
    pool = LanePool(policies, config)
    ids = pool.job_ids(*_job_queue(2, [bot_index(b) for b in config.bots], 48))
    pool.play(ids, 8)
    assert pool.done[ids[:8]].all() and pool.done[ids[8:]].any() and not pool.done[ids].all()
    running = pool._job[pool._job >= 0]
    assert len(running) and not pool.done[running].any()  # episodes still running, kept for the next call
    pool.play(ids[:150], 140)
    assert pool.done[ids[:140]].all()
    assert moves == [16]  # the second call moved to the tail's lanes
    pool.play(ids)
    whole = LanePool(policies, dataclasses.replace(config, lanes=len(ids), chunk_s=120.0))  # one lane per job
    whole.play(ids)
    assert pool.done[ids].all() and whole.done[ids].all()
    for name in ("outcome", "t", "damage_dealt", "damage_taken", "counts", "invalid"):
        np.testing.assert_array_equal(pool.results[name][ids], whole.results[name][ids], err_msg=name)


def test_lane_sets_are_multiples_of_16_and_never_more_than_asked():
    from jaxarena.coder.batch_rollout import lane_sets

    assert lane_sets(2048, 12_000) == [2048, 512]
    assert lane_sets(2048, 300) == [304, 64]  # as many as the jobs, rounded up; a quarter rounded down
    assert lane_sets(512, 200) == [208]  # a quarter (48) would be under MIN_TAIL_LANES
    assert lane_sets(4, 6) == [4]  # never more than asked, even off the multiple


def test_a_pool_refuses_jobs_it_does_not_hold():
    from jaxarena.coder.batch_rollout import LanePool

    pool = LanePool([translate(RUSH)], QUICK)
    with pytest.raises(ValueError, match="outside this pool's 1 candidates, 3 bots and 6 episodes"):
        pool.job_ids([0], [0], [6])
    with pytest.raises(ValueError, match="outside"):
        pool.job_ids([1], [0], [0])
    with pytest.raises(ValueError, match="3 required of 2 jobs"):
        pool.play(pool.job_ids([0, 0], [0, 0], [0, 1]), 3)
    with pytest.raises(ValueError, match="distinct"):
        pool.play(pool.job_ids([0, 0], [0, 0], [1, 1]))
    with pytest.raises(ValueError, match="distinct"):
        pool.play([-1])


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_a_score_does_not_depend_on_the_batch():
    alone = score_sources([KITE], QUICK)[0]
    # Two compiled programs: [RUSH, KITE] and [the retreating squad].
    batch = score_sources([RUSH, KITE, RUSH.replace("MOVE_TO_BOT", "RETREAT")], dataclasses.replace(QUICK, batch=2))
    assert batch[1] == alone
    assert batch[0].win_rate != batch[2].win_rate or batch[0].stats != batch[2].stats


def test_candidates_meet_the_same_episodes():
    """Paired seeds: the keys depend on (seed, bot, episode), never on the candidate."""
    a, b = episode_keys(7, 0, 4), episode_keys(7, 0, 4)
    chex.assert_trees_all_equal(jax.random.key_data(a), jax.random.key_data(b))
    assert not np.array_equal(jax.random.key_data(episode_keys(7, 1, 4)), jax.random.key_data(a))
    assert len({tuple(np.asarray(k).ravel()) for k in jax.random.key_data(a)}) == 4


def test_actions_outside_the_six_are_an_error():
    def bad(params, obs, key):
        return jnp.full(obs.shape[:-1], 7, jnp.int32)

    def good(params, obs, key):
        return jnp.where(obs[..., 7] > 0.5, 3, 0).astype(jnp.int32)

    scores = score_policies([bad, good], QUICK)
    assert scores[0].reward == PROGRAM_ERROR and "outside 0..5" in scores[0].error
    assert scores[1].status == "ok" and scores[1].reward > 0


def test_a_policy_that_fails_on_a_batch_is_an_error_and_spares_the_others():
    def breaks_batched(params, obs, key):
        # Traces for one arena, but has no batching rule: fails once the rollout vmaps it.
        out = jax.ShapeDtypeStruct(obs.shape[:-1], jnp.int32)
        return jax.pure_callback(lambda o: np.zeros(o.shape[:-1], np.int32), out, obs)

    def float_actions(params, obs, key):
        return obs[..., 0]

    scores = score_policies([breaks_batched, float_actions, translate(RUSH)], QUICK)
    assert jax.eval_shape(breaks_batched, None, jax.ShapeDtypeStruct((5, 23), jnp.float32), None).shape == (5,)
    assert scores[0].reward == PROGRAM_ERROR and "vmap" in scores[0].error
    assert scores[1].reward == PROGRAM_ERROR and scores[1].error_kind == "shape"
    assert scores[2].status == "ok"


def test_the_cache_scores_a_repeated_program_once():
    cache = {}
    first = score_sources([RUSH, RUSH, None], QUICK, cache)
    assert first[0] is first[1] and first[2].reward == NO_CODE
    assert list(cache) == [RUSH]
    again = score_sources([RUSH], QUICK, cache)
    assert again[0] is first[0]


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_the_scenario_is_the_one_scored():
    """`headroom`'s bot has 5x the HP: the rush squad deals far more than the paper bot's 300 HP in a win."""
    config = ScoreConfig(episodes_per_bot=4, bots=("aggressive",), lanes=4, scenario="headroom")
    score = score_sources([RUSH], config)[0]
    assert score.stats["aggressive"]["damage_dealt"] > 300.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"episodes_per_bot": 0}, "episodes_per_bot"),
        ({"lanes": 0}, "lanes"),
        ({"batch": 0}, "batch"),
        ({"scenario": "nope"}, "presets"),
        ({"bots": ("nope",)}, "unknown bot"),
        ({"bots": ()}, "at least one"),
        ({"bots": ("evasive", "evasive")}, "repeat"),
        ({"chunk_s": 0.15}, "whole number"),
    ],
)
def test_bad_score_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScoreConfig(**kwargs)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_win_rate_counts_npc_wins():
    fn, jobs = make_batch_scorer([translate(RUSH)], QUICK)
    results = jax.device_get(fn())
    score = score_sources([RUSH], QUICK)[0]
    assert score.win_rate["aggressive"] == pytest.approx(np.mean(results["outcome"] == NPC_WIN))
    assert np.all(results["outcome"] > 0)  # every job was played to its end

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
from jaxarena.coder.scoring import (
    NO_CODE,
    PROGRAM_ERROR,
    ScoreConfig,
    episode_keys,
    make_batch_scorer,
    score_policies,
    score_replies,
    score_sources,
)
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
def test_every_episode_equals_the_one_episode_runner_on_its_key():
    """Chunked play with lane refills changes nothing: each job is the runner's episode on the job's key.

    The reference plays the keys batched (vmapped), as the scorer does: XLA's vectorised and scalar float
    code can differ in the last bit, which a long episode may amplify (an unbatched run is not the reference).
    """
    policies = [translate(RUSH), translate(KITE)]
    config = ScoreConfig(episodes_per_bot=4, bots=("balanced",), lanes=3, seed=5, chunk_s=2.0)
    fn, jobs = make_batch_scorer(policies, config)
    results = jax.device_get(fn())
    env, params = jaxarena.make("Arena-v0")
    for c, policy in enumerate(policies):
        run = make_runner(env, params, policy, 0, 1)
        for bot in config.bots:
            b = bot_index(bot)
            keys = episode_keys(config.seed, b, config.episodes_per_bot)
            ref = jax.device_get(jax.vmap(lambda k, b=b, run=run: run(None, params.replace(bot_type=b), k))(keys))
            sel = np.nonzero((jobs["cand"] == c) & (jobs["bot"] == b))[0]  # in episode order
            np.testing.assert_array_equal(results["outcome"][sel], ref.outcome[:, 0])
            np.testing.assert_allclose(results["t"][sel] * 0.1, ref.duration_s[:, 0], atol=1e-4)
            np.testing.assert_allclose(results["damage_dealt"][sel], ref.damage_dealt[:, 0], rtol=1e-5)
            np.testing.assert_allclose(results["damage_taken"][sel], ref.damage_taken[:, 0], rtol=1e-5)
    assert len(set(results["outcome"].tolist())) > 1  # wins and other outcomes: a real comparison


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

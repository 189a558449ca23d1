"""The coder's GRPO: its loss moves the right replies, a step learns only from unequal rewards, and its
log-probs are those of the sampler that drew the group (top-k, then top-p, at the temperature)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_coder import SYSTEM, make_tiny_generator, random_adapter

from jaxarena.coder.tuning import examples as X
from jaxarena.coder.tuning.model import CoderModel
from jaxarena.coder.tuning.train import CoderTuneConfig, grpo_loss
from jaxarena.llm import lora as L


@pytest.fixture(scope="module")
def tiny_generator():
    return make_tiny_generator()


def test_grpo_raises_the_better_reply_and_lowers_the_worse(tiny_generator):
    model = CoderModel(tiny_generator, SYSTEM)
    lora = L.LoraConfig(rank=4)
    adapter = random_adapter(model.cfg, lora, jax.random.key(1), scale=0.05)
    batch = model.batch([("Plan: a.", "return MELEE"), ("Plan: a.", "return RETREAT")])
    ref = model.log_probs(None, None, batch, with_logits=True)[1]
    advantages = jnp.array([1.0, -1.0])

    def loss(a):
        return grpo_loss(model, lora, 0.0, a, model.base, model.prefix_arrays(), batch, advantages, ref)[0]

    g = jax.grad(loss)(adapter)
    stepped = jax.tree.map(lambda a, d: a - 0.05 * d, adapter, g)
    before = np.asarray(model.log_probs(adapter, lora, batch)).sum(-1)
    after = np.asarray(model.log_probs(stepped, lora, batch)).sum(-1)
    assert after[0] > before[0] and after[1] < before[1]
    # The KL term is exact and zero at the reference.
    _, aux = grpo_loss(model, lora, 1.0, None, model.base, model.prefix_arrays(), batch, advantages, ref)
    assert abs(float(aux["kl"])) < 1e-6


def test_a_grpo_step_learns_from_unequal_rewards_skips_equal_ones_and_leaves_the_generator_as_it_was(
    tiny_generator, monkeypatch
):
    from jaxarena.coder.score_types import Score
    from jaxarena.coder.tuning import train as T
    from jaxarena.llm.types import Prompt

    model = CoderModel(tiny_generator, SYSTEM)
    # The loop's coder prompt does not fit the tiny model's 512-token context: a short one, candidates 1..k.
    monkeypatch.setattr(
        T, "coder_prompts", lambda r, t, plans, k: [Prompt(SYSTEM, f"{p} #{i}") for p in plans for i in range(k)]
    )
    config = CoderTuneConfig(method="grpo", group=2, rank=4, lr=1e-2, max_new_tokens=12)
    examples = [X.Example("e", "f", "plan e", "def policy(obs):\n    return MELEE")]
    rewards = {"now": [0.9, -1.0]}
    monkeypatch.setattr(T, "score_sources", lambda sources, *a, **k: [Score(r, "ok") for r in rewards["now"]])
    apply = jax.jit(lambda a, s, g: (jax.tree.map(lambda x, d: x - 0.5 * d, a, g), s))
    adapter = L.init_adapter(model.cfg, config.lora, jax.random.key(0))
    run_step, _ = T._grpo_method(config, model, examples, [], "ref", "task", apply, adapter)
    seed_before = tiny_generator.seed
    stepped, _, stats = run_step(adapter, None, 0)
    assert stats["mean_reward"] == pytest.approx(-0.05) and "loss" in stats
    assert tiny_generator.params is tiny_generator.base_params and tiny_generator.seed == seed_before
    changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool(jnp.any(a != b)), adapter, stepped))
    assert any(changed)
    rewards["now"] = [0.5, 0.5]  # no advantage: the adapter is returned as it was
    same, _, stats = run_step(stepped, None, 1)
    assert "loss" not in stats
    chex.assert_trees_all_equal(same, stepped)


def test_log_probs_at_a_temperature_are_those_of_the_tempered_softmax(tiny_generator):
    model = CoderModel(tiny_generator, SYSTEM)
    batch = model.batch([("Plan: rush.", "def policy(obs):\n    return MELEE")])
    _, plain = model.log_probs(None, None, batch, with_logits=True)
    hot = model._log_probs(model.base, None, *model.prefix_arrays(), batch, lora=None, temperature=2.0)
    logits = np.asarray(plain)  # a log-softmax is the logits up to a per-position constant
    expected = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits / 2.0, -1)), batch.targets[..., None], -1)[
        ..., 0
    ]
    np.testing.assert_allclose(np.asarray(hot)[batch.reply], expected[batch.reply], atol=1e-5)
    assert not np.allclose(np.asarray(hot)[batch.reply], np.asarray(model.log_probs(None, None, batch))[batch.reply])


def test_grpo_takes_log_probs_under_the_sampler_that_drew_the_replies(tiny_generator):
    from jaxarena.coder.tuning.model import sampled_log_probs
    from jaxarena.llm.programs import sample_token

    # The rule: the frequencies of the generator's own sampler (top-k, then top-p, at a temperature).
    V, top_k, top_p, t = 12, 5, 0.8, 0.7
    logits = jax.random.normal(jax.random.key(7), (V,)) * 1.5
    keys = jax.random.split(jax.random.key(8), 40_000)
    draws = np.asarray(jax.vmap(lambda k: sample_token(logits, k, t, top_p, top_k))(keys))
    freq = np.bincount(draws, minlength=V) / len(draws)
    every = jnp.broadcast_to(logits / t, (V, V))  # one row per target token
    p = np.exp(np.asarray(sampled_log_probs(every, jnp.arange(V), top_k, top_p)))
    drawn = freq > 0
    assert 1 < drawn.sum() < top_k  # top-p cut inside the top-k: both truncations are exercised
    np.testing.assert_allclose(p[drawn].sum(), 1.0, atol=1e-5)
    np.testing.assert_allclose(p[drawn], freq[drawn], atol=0.01)
    # The wiring: with nothing truncated, the sampler's log-probs are the full softmax's.
    model = CoderModel(tiny_generator, SYSTEM)
    batch = model.batch([("Plan: rush.", "def policy(obs):\n    return MELEE")])
    full = model._log_probs(model.base, None, *model.prefix_arrays(), batch, lora=None, temperature=0.7)
    untruncated = model._log_probs(
        model.base, None, *model.prefix_arrays(), batch, lora=None, temperature=0.7, sampler=(model.cfg.vocab_size, 1.0)
    )
    np.testing.assert_allclose(np.asarray(untruncated), np.asarray(full), atol=1e-5)
    cut = model._log_probs(
        model.base, None, *model.prefix_arrays(), batch, lora=None, temperature=0.7, sampler=(top_k, top_p)
    )
    cut, full = np.asarray(cut)[batch.reply], np.asarray(full)[batch.reply]
    assert np.all(cut >= full - 1e-6) and np.any(cut > full + 1e-3)  # renormalised over fewer tokens: higher
    # GRPO's loss is built on them: with no KL, -advantage x the mean of the sampler's log-probs.
    from jaxarena.coder.loop_config import CODER_TOP_P

    loss, _ = grpo_loss(model, None, 0.0, None, model.base, model.prefix_arrays(), batch, jnp.ones(1), 0.0, 0.7)
    sampled = model._log_probs(
        model.base,
        None,
        *model.prefix_arrays(),
        batch,
        lora=None,
        temperature=0.7,
        sampler=(tiny_generator.top_k, CODER_TOP_P),
    )
    np.testing.assert_allclose(float(loss), -float(np.asarray(sampled).sum() / batch.reply.sum()), rtol=1e-5)
    assert not np.isclose(float(loss), -float(full.sum() / batch.reply.sum()), rtol=1e-4)


def test_a_grpo_pair_is_trained_on_the_stop_token_its_reply_drew(monkeypatch):
    from jaxarena.coder.score_types import Score
    from jaxarena.coder.tuning import train as T
    from jaxarena.llm.types import Prompt

    gen = make_tiny_generator()
    eot = gen.tokenizer.end_of_turn_id
    # Half the vocabulary stops a reply, so most replies end on a stop token other than the end of turn.
    monkeypatch.setattr(gen.tokenizer, "stop_ids", frozenset({eot, *range(3, gen.cfg.vocab_size // 2)}))
    model = CoderModel(gen, SYSTEM)
    monkeypatch.setattr(
        T, "coder_prompts", lambda r, t, plans, k: [Prompt(SYSTEM, f"{p} #{i}") for p in plans for i in range(k)]
    )
    monkeypatch.setattr(
        T, "score_sources", lambda sources, *a, **k: [Score(0.1 * i, "ok") for i in range(len(sources))]
    )
    drawn = []
    real_generate = gen.generate
    monkeypatch.setattr(gen, "generate", lambda *a, **k: drawn.extend(real_generate(*a, **k)) or drawn[-len(a[0]) :])
    config = CoderTuneConfig(method="grpo", group=4, rank=4, max_new_tokens=12)
    examples = [X.Example("e", "f", "plan e", "def policy(obs):\n    return MELEE")]
    adapter = L.init_adapter(model.cfg, config.lora, jax.random.key(0))
    record = T._grpo_step(config, model, config.lora, adapter, examples, 0, "ref", "task", None)
    stops = [r.stop_id for r in drawn]
    assert any(s is not None and s != eot for s in stops)  # the case the end-of-turn token would get wrong
    for (_, ids), reply in zip(record["pairs"], drawn, strict=True):
        assert ids == list(reply.token_ids) + ([reply.stop_id] if reply.stop_id is not None else [])
        assert (reply.stop_id is None) == (len(reply.token_ids) == gen.max_new_tokens)

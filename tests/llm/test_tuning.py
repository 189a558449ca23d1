"""Tuning the embedded tag model: exactness on the graph path, learning a synthetic rule, bit-exact resume."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from embedded_common import generator

from jaxarena.llm.graph_tags import GraphTagSource
from jaxarena.llm.lora import LoraConfig, init_adapter, load_adapter
from jaxarena.llm.tuning.data import Decisions
from jaxarena.llm.tuning.grpo import GRPOConfig, make_grpo_update, sample_group
from jaxarena.llm.tuning.metrics import choice_metrics
from jaxarena.llm.tuning.model import TagModel
from jaxarena.llm.tuning.train import TrainConfig, separated_pairs, train

LORA = LoraConfig(rank=4, targets=("q", "v"))
RULE_TAG, DEFAULT_TAG = 2, 1  # the synthetic rule: answer 2 when the bot's HP is under 100, else 1


@pytest.fixture(scope="module")
def source():
    from jaxarena.llm.backends.embedded import EmbeddedBackend

    return GraphTagSource.from_backend(EmbeddedBackend(generator=generator("bf16")))


@pytest.fixture(scope="module")
def model(source):
    return TagModel(source, LORA)


def random_features(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack(
        [
            rng.uniform(0, 300, n),
            rng.uniform(0, 60, n),
            rng.integers(1, 6, n),
            rng.integers(0, 2, n),
            rng.uniform(0, 40, n),
        ],
        axis=1,
    ).astype(np.float32)


def rule(features: np.ndarray) -> np.ndarray:
    return np.where(features[:, 0] < 100, RULE_TAG, DEFAULT_TAG)


def synthetic(n: int, seed: int) -> Decisions:
    """Decisions whose only winning tag follows the rule (wins 1.0 there, 0.0 elsewhere)."""
    f = random_features(n, seed)
    best = rule(f)
    win = np.eye(4, dtype=np.float32)[best]
    zeros = np.zeros((n, 4), np.float32)
    return Decisions(f, win, zeros, zeros, best.astype(np.int32), np.zeros(n, int), np.zeros(n, int), rollouts=8)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_a_zero_adapter_gives_the_base_models_option_logits_exactly(source, model):
    f = jnp.asarray(random_features(8, 0))
    tokens, n_pad = source.lines.tokens(f)
    base = jax.jit(source.logits)(source.arrays, tokens, n_pad)
    tuned = model.logits(init_adapter(model.cfg, LORA, jax.random.key(3)), f)
    np.testing.assert_array_equal(np.asarray(tuned), np.asarray(base))


def test_separated_pairs_need_win_rates_apart_by_more_than_their_cis():
    win = np.array([[1.0, 0.0, 0.875, 0.5], [0.5, 0.5, 0.5, 0.5]], np.float32)
    states, better, worse = separated_pairs(win, rollouts=8)
    pairs = set(zip(states.tolist(), better.tolist(), worse.tolist(), strict=True))
    assert (0, 0, 1) in pairs and (0, 2, 1) in pairs
    assert (0, 0, 2) not in pairs  # 8/8 against 7/8 is within the CI
    assert not any(s == 1 for s, _, _ in pairs)  # all tied: no pair


@pytest.mark.long  # about 4 min per method on 2 cores
@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_offline_methods_learn_a_synthetic_rule(model, method, tmp_path):
    config = TrainConfig(
        method=method, steps=60, batch=16, lr=3e-3, beta=2.0, rank=4, targets=("q", "v"), eval_every=60, eval_states=96
    )
    held_out = synthetic(96, seed=1)
    stock = choice_metrics(model.probs(held_out.features, model.zero_adapter()), held_out.win)
    path = train(config, model, synthetic(512, seed=0), held_out, tmp_path / method, progress=lambda s: None)
    tuned = load_adapter(path, model.cfg, model.base_sha256)
    metrics = choice_metrics(model.probs(held_out.features, tuned.adapter), held_out.win)
    assert stock["agreement"] < 0.8
    assert metrics["agreement"] >= 0.9, (method, stock, metrics)
    assert tuned.card["held_out"]["tuned"]["agreement"] == pytest.approx(metrics["agreement"])


@pytest.mark.long  # GRPO steps of the embedded model until it gives a new answer (~3 min on 2 cores)
def test_grpo_update_learns_from_rewards_an_answer_the_stock_model_never_gives(model):
    # Rewarded for tag 2, which the stock model ranks below 1 everywhere. A rule that depends on the state
    # (2 under a threshold of the bot's HP, 1 above) is not learned from the stock model at any learning rate
    # tried (3e-4 to 3e-3): the shared marginal moves first, onto the tag the model already prefers, and the
    # groups of the other states then draw no winning tag. docs/llm-training.md reports it; SFT learns it.
    config = GRPOConfig(states=16, group=8, inner_steps=2, lr=2e-3, kl_coef=0.02)
    optimizer = optax.adam(config.lr)
    update = make_grpo_update(model, config, optimizer)

    @jax.jit
    def step(adapter, opt_state, base, features, key):
        tags = sample_group(model, base, adapter, features, key, config)
        rewards = (tags == RULE_TAG).astype(jnp.float32)
        return update(adapter, opt_state, base, features, tags, rewards)

    adapter = model.zero_adapter()
    opt_state = optimizer.init(adapter)
    held_out = random_features(64, seed=1)
    assert np.mean(np.argmax(model.probs(held_out, adapter), -1) == RULE_TAG) == 0.0
    for i in range(10):
        f = jnp.asarray(random_features(config.states, 100 + i))
        adapter, opt_state, stats = step(adapter, opt_state, model.base, f, jax.random.key(i))
    assert np.mean(np.argmax(model.probs(held_out, adapter), -1) == RULE_TAG) >= 0.9
    assert np.isfinite(float(stats["loss"])) and float(stats["kl"]) > 0


@pytest.mark.slow
def test_resume_is_bit_exact(model, tmp_path):
    config = TrainConfig(method="sft", steps=4, batch=4, rank=4, targets=("q", "v"), eval_every=2, eval_states=8)
    data, held_out = synthetic(64, seed=0), synthetic(8, seed=1)
    quiet = {"progress": lambda s: None}
    straight = train(config, model, data, held_out, tmp_path / "straight", **quiet)
    import dataclasses

    half = dataclasses.replace(config, steps=2)
    train(half, model, data, held_out, tmp_path / "resumed", **quiet)
    resumed = train(config, model, data, held_out, tmp_path / "resumed", **quiet)
    a = load_adapter(straight, model.cfg, model.base_sha256)
    b = load_adapter(resumed, model.cfg, model.base_sha256)
    assert a.checksum == b.checksum
    chex.assert_trees_all_equal(a.adapter, b.adapter)


@pytest.mark.slow
def test_a_run_started_from_an_adapter_records_that_adapter_at_step_0(source, tmp_path):
    """GRPO after SFT (`--init-from`) starts from a trained adapter: step 0 of its curve is that adapter, not the
    stock model."""
    import json

    start = init_adapter(source.generator.cfg, LORA, jax.random.key(5))
    leaves, treedef = jax.tree.flatten(start)
    keys = jax.random.split(jax.random.key(6), len(leaves))
    # B != 0: the adapter adds something, so its choices differ from the stock model's.
    start = treedef.unflatten([x + 0.05 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)])
    started = TagModel(source, LORA, start)
    held_out = synthetic(8, seed=1)
    config = TrainConfig(method="sft", steps=1, batch=4, rank=4, targets=("q", "v"), eval_every=1, eval_states=8)
    train(config, started, synthetic(16, seed=0), held_out, tmp_path / "run", progress=lambda s: None)
    step0 = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert step0["step"] == 0
    expected = choice_metrics(started.probs(held_out.features, start), held_out.win)
    stock = choice_metrics(started.probs(held_out.features, started.zero_adapter()), held_out.win)
    assert step0["eval"]["entropy_bits"] == pytest.approx(expected["entropy_bits"])
    assert abs(expected["entropy_bits"] - stock["entropy_bits"]) > 1e-3, "the start must differ from the stock model"

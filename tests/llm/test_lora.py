"""LoRA adapters: a zero adapter is the base model exactly, gradients reach every adapter, files are checked."""

from __future__ import annotations

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gguf_common import ARCHS, gguf_path

from jaxarena.llm import model as M
from jaxarena.llm.lora import (
    TARGETS,
    AdapterError,
    LoraConfig,
    adapter_checksum,
    attach,
    init_adapter,
    load_adapter,
    save_adapter,
    target_shapes,
)
from jaxarena.llm.weights import load_model


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request):
    """(cfg, bf16 params, sha256) of a tiny synthetic GGUF, llama and qwen2 (qwen2 has q/k/v biases)."""
    loaded = load_model(gguf_path(request.param), use_cache=False)
    return loaded.config, M.params_to_device(loaded.weights), loaded.sha256


def _tokens(cfg, batch=3, length=9):
    toks = jax.random.randint(jax.random.key(1), (batch, length), 0, cfg.vocab_size)
    valid = jnp.arange(length)[None, :] < jnp.array([[length], [length - 2], [4]])[:batch]
    return toks, valid


def _random_adapter(cfg, lora, key):
    """An adapter with B drawn too, so every A and B has a gradient (B = 0 stops A's)."""
    fresh = init_adapter(cfg, lora, key)
    leaves, tree = jax.tree.flatten(fresh)
    keys = jax.random.split(jax.random.fold_in(key, 7), len(leaves))
    return jax.tree.unflatten(tree, [0.05 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves, strict=True)])


def test_zero_adapter_reproduces_the_base_logits_exactly(tiny):
    cfg, params, _ = tiny
    toks, valid = _tokens(cfg)
    base = M.full_forward(cfg, params, toks, valid)
    for targets in (TARGETS, ("q", "v"), ("down",)):
        lora = LoraConfig(rank=4, targets=targets)
        adapted = M.full_forward(cfg, attach(params, init_adapter(cfg, lora, jax.random.key(0)), lora), toks, valid)
        np.testing.assert_array_equal(np.asarray(adapted), np.asarray(base))


def test_a_nonzero_adapter_changes_the_logits(tiny):
    cfg, params, _ = tiny
    toks, valid = _tokens(cfg)
    lora = LoraConfig(rank=4)
    base = M.full_forward(cfg, params, toks, valid)
    adapted = M.full_forward(cfg, attach(params, _random_adapter(cfg, lora, jax.random.key(2)), lora), toks, valid)
    assert float(jnp.max(jnp.abs(adapted - base))) > 1e-3


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_gradients_reach_every_adapter_array_and_keep_float32(tiny):
    cfg, params, _ = tiny
    toks, valid = _tokens(cfg)
    lora = LoraConfig(rank=2)
    adapter = _random_adapter(cfg, lora, jax.random.key(3))

    def loss(ad):
        logits = M.full_forward(cfg, attach(params, ad, lora), toks, valid)
        return jnp.mean(jax.nn.log_softmax(logits)[..., 5])

    grads = jax.grad(loss)(adapter)
    chex.assert_trees_all_equal_shapes_and_dtypes(grads, adapter)
    for layer in grads:
        assert set(layer) == set(TARGETS)
        for t, ab in layer.items():
            for name, g in ab.items():
                assert g.dtype == jnp.float32
                assert float(jnp.max(jnp.abs(g))) > 0, f"no gradient reaches {t}.{name}"


def test_adapter_shapes_follow_the_model(tiny):
    cfg, _, _ = tiny
    lora = LoraConfig(rank=3, targets=("k", "o", "up"))
    adapter = init_adapter(cfg, lora, jax.random.key(0))
    shapes = target_shapes(cfg)
    assert len(adapter) == cfg.n_layers
    for layer in adapter:
        assert tuple(layer) == ("k", "o", "up")
        for t, ab in layer.items():
            assert ab["a"].shape == (shapes[t][0], 3) and ab["b"].shape == (3, shapes[t][1])
            assert not np.any(np.asarray(ab["b"]))


def test_config_rejects_bad_rank_and_targets():
    with pytest.raises(ValueError, match="rank"):
        LoraConfig(rank=0)
    with pytest.raises(ValueError, match="targets"):
        LoraConfig(targets=("q", "lm_head"))
    assert LoraConfig(targets=("v", "q")).targets == ("q", "v")


def test_save_and_load_round_trip(tiny, tmp_path):
    cfg, params, sha = tiny
    lora = LoraConfig(rank=2, alpha=4.0, targets=("q", "v", "down"))
    adapter = _random_adapter(cfg, lora, jax.random.key(4))
    save_adapter(tmp_path / "ad", adapter, lora, base_sha256=sha, card={"method": "sft", "steps": 3})
    got = load_adapter(tmp_path / "ad", cfg, sha)
    assert got.lora == lora and got.card["method"] == "sft" and got.card["steps"] == 3
    assert got.checksum == adapter_checksum(adapter) == got.card["checksum"]
    chex.assert_trees_all_equal(got.adapter, adapter)


def test_bad_adapters_are_refused_with_one_clear_message(tiny, tmp_path):
    cfg, _, sha = tiny
    lora = LoraConfig(rank=2, targets=("q",))
    adapter = init_adapter(cfg, lora, jax.random.key(5))
    good = save_adapter(tmp_path / "good", adapter, lora, base_sha256=sha)

    with pytest.raises(AdapterError, match="base model"):
        load_adapter(good, cfg, "0" * 64)
    with pytest.raises(AdapterError, match="not an adapter directory"):
        load_adapter(tmp_path / "missing", cfg, sha)

    # The card says rank 4, the arrays are rank 2.
    wrong_rank = save_adapter(tmp_path / "rank", adapter, lora, base_sha256=sha)
    card = json.loads((wrong_rank / "card.json").read_text())
    card["lora"]["rank"] = 4
    (wrong_rank / "card.json").write_text(json.dumps(card))
    with pytest.raises(AdapterError, match="rank 4"):
        load_adapter(wrong_rank, cfg, sha)

    corrupt = save_adapter(tmp_path / "corrupt", adapter, lora, base_sha256=sha)
    (corrupt / "adapter.npz").write_bytes(b"not a zip file")
    with pytest.raises(AdapterError, match="corrupt"):
        load_adapter(corrupt, cfg, sha)

    edited = save_adapter(tmp_path / "edited", _random_adapter(cfg, lora, jax.random.key(6)), lora, base_sha256=sha)
    card = json.loads((edited / "card.json").read_text())
    card["checksum"] = adapter_checksum(adapter)
    (edited / "card.json").write_text(json.dumps(card))
    with pytest.raises(AdapterError, match="checksum"):
        load_adapter(edited, cfg, sha)

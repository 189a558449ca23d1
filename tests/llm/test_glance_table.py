"""The glance algorithm's table learner: an 18 x 4 table of logits trained by the LLM's steps, on its keys."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxarena.llm.glance import NUM_GLANCE_CELLS
from jaxarena.llm.tuning.glance import GlanceConfig
from jaxarena.llm.tuning.glance_learner import TABLE_LR, TableLearner, as_learner, prior_logits
from jaxarena.names import NUM_TAGS, TAG_NAMES

AGGRESSIVE = TAG_NAMES.index("Aggressive")


def test_the_table_starts_at_its_prior_and_answers_as_the_stock_llm_does():
    stock = prior_logits("stock")
    assert stock.shape == (NUM_GLANCE_CELLS, NUM_TAGS) and stock.dtype == np.float32
    np.testing.assert_allclose(np.exp(stock).sum(-1), 1.0, rtol=1e-5)  # log-probabilities
    assert set(np.argmax(stock, -1)) == {AGGRESSIVE}  # the stock LLM answers Aggressive to every prompt
    learner = TableLearner("stock")
    params = learner.init(seed=3)
    np.testing.assert_array_equal(np.asarray(learner.logits(learner.frozen, params)), stock)
    np.testing.assert_array_equal(np.asarray(learner.logits(learner.frozen, None)), stock)  # the KL's reference
    params = params.at[0, 0].add(1.0)  # the parameters are the logits; the reference stays the prior
    assert float(learner.logits(learner.frozen, params)[0, 0]) == pytest.approx(float(stock[0, 0]) + 1.0)
    np.testing.assert_array_equal(np.asarray(TableLearner("uniform").init(0)), np.zeros((NUM_GLANCE_CELLS, NUM_TAGS)))
    with pytest.raises(ValueError, match="prior is one of stock, uniform"):
        TableLearner("flat")


def test_a_table_run_names_its_learner_and_the_llms_config_is_unchanged():
    assert GlanceConfig().lr == 3e-4 and "learner" not in GlanceConfig().to_json()  # the recipe's runs and cards
    table = GlanceConfig(learner="table")
    assert table.lr == TABLE_LR and table.to_json()["learner"] == "table" and table.to_json()["table_prior"] == "stock"
    assert GlanceConfig(learner="table", lr=0.2).lr == 0.2
    assert GlanceConfig(learner="table", table_prior="uniform").to_json() != table.to_json()
    with pytest.raises(ValueError, match="learner must be one of llm, table"):
        GlanceConfig(learner="mlp")
    # The learner given must be the one the config names: a checkpoint is never resumed by the other.
    assert as_learner(None, table).name == "table"
    with pytest.raises(ValueError, match="names the llm learner"):
        as_learner(TableLearner(), GlanceConfig())
    with pytest.raises(ValueError, match="names the uniform prior"):
        as_learner(TableLearner("stock"), GlanceConfig(learner="table", table_prior="uniform"))


def test_the_update_moves_only_the_cells_with_an_advantage():
    """The table's cells share nothing: where no group asked (advantage 0) its logits stay at the prior's.

    Not bit for bit: the target there is the prior's softmax recomputed, a rounding away from the table's own, and
    Adam scales that tiny gradient up to a step of up to the learning rate's size. Such a logit moves by about
    0.015 in 30 updates and no further in 200, far below the stock LLM's smallest margin between its first and
    second answer (0.38).
    """
    import optax

    from jaxarena.llm.tuning.glance import make_update

    learner = TableLearner("stock")
    config = GlanceConfig(learner="table")
    optimizer = optax.adam(config.lr)
    update = jax.jit(make_update(learner, config, optimizer))
    advantage = np.zeros((NUM_GLANCE_CELLS, NUM_TAGS), np.float32)
    advantage[14] = [-0.2, -0.2, -0.2, 0.6]  # Retreat wins in cell 14
    params, opt_state = learner.init(0), optimizer.init(learner.init(0))
    losses = []
    for _ in range(30):
        params, opt_state, stats = update(params, opt_state, learner.frozen, jnp.asarray(advantage))
        losses.append(float(stats["loss"]))
    table = np.argmax(np.asarray(params), -1)
    assert table[14] == TAG_NAMES.index("Retreat")
    assert np.all(np.delete(table, 14) == AGGRESSIVE)
    np.testing.assert_allclose(np.delete(np.asarray(params), 14, 0), np.delete(prior_logits("stock"), 14, 0), atol=0.03)
    assert np.abs(np.asarray(params)[14] - prior_logits("stock")[14]).max() > 0.5
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0] and float(stats["kl"]) > 0


@pytest.mark.slow  # a few training steps of the table on the raid squad, then 8 held-out episodes (~2 min, 2 cores)
def test_a_table_run_learns_and_its_table_plays_where_an_adapters_does(tmp_path, monkeypatch):
    from jaxarena.llm.adapters import resolve_adapter
    from jaxarena.llm.backends.embedded import EmbeddedBackend
    from jaxarena.llm.glance_model import load_glance_table, read_glance_table
    from jaxarena.llm.lora import AdapterError
    from jaxarena.llm.tuning.glance import train_glance
    from jaxarena.llm.tuning.glance_report import finish, initials, markdown, parse_table

    # A table run never loads the LLM, nor does playing its table.
    def no_llm(self):
        raise AssertionError("the table learner loaded the LLM")

    monkeypatch.setattr(EmbeddedBackend, "load", no_llm)
    config = GlanceConfig(
        learner="table", steps=3, bots=("balanced",), spawns=8, group=4, ask="visited", lr=0.1, inner_steps=8
    )
    params, history = train_glance(config, tmp_path, progress=lambda line: None)
    assert [h["step"] for h in history] == [1, 2, 3]
    assert all(np.isfinite(h["loss"]) and h["kl"] >= 0 for h in history)
    start = "".join(str(t) for t in np.argmax(prior_logits("stock"), -1))
    assert history[-1]["table"] != start  # play moved its answers off the stock LLM's
    # Only cells a group asked about moved (beyond the drift of rounding, under 0.04 here, see above): the
    # table's cells share nothing.
    asked = np.sum([h["asked"] for h in history], axis=0) > 0
    moved = np.any(np.abs(np.asarray(params) - prior_logits("stock")) > 0.1, axis=-1)
    assert moved.any() and not np.any(moved & ~asked)

    result = finish(None, params, config, tmp_path, history, episodes=8, n_boot=50)
    assert result["labels"] == ["prior table", "tuned table"] and "| tuned table |" in markdown(result)
    card = json.loads((tmp_path / "table" / "card.json").read_text())
    assert card["kind"] == "glance-table" and card["config"]["learner"] == "table"
    # The same path as an adapter's table: by directory through load_glance_table (Combination G) and
    # parse_table (studies/glance_play.py), exact to the float32 logits.
    table, checksum = load_glance_table(str(tmp_path / "table"))
    np.testing.assert_array_equal(table, np.argmax(np.asarray(params), -1))
    np.testing.assert_array_equal(read_glance_table(tmp_path / "table")[0], np.asarray(params))
    assert checksum == card["checksum"] and [TAG_NAMES[t] for t in table] == card["played"]["table"]
    np.testing.assert_array_equal(parse_table(str(tmp_path / "table")), table)
    found = resolve_adapter(str(tmp_path / "table"), kind=("glance-adapter", "glance-table"))
    assert found == (tmp_path / "table").resolve()
    with pytest.raises(AdapterError, match="trained without the LLM"):
        resolve_adapter(str(tmp_path / "table"), kind="llm-adapter")
    # Combination G's preflight asks for the LLM's weights for an adapter only: a table plays without them.
    from types import SimpleNamespace

    from jaxarena.protocol.combinations import g

    def g_context(adapter):
        return SimpleNamespace(config=SimpleNamespace(options_of=lambda name: g.GOptions(adapter=adapter)))

    monkeypatch.setattr(EmbeddedBackend, "preflight", no_llm)
    g._preflight(g_context(str(tmp_path / "table")))
    with pytest.raises(AssertionError, match="loaded the LLM"):
        g._preflight(g_context("smollm2-raid-glance"))
    played = result["readers"]["tuned table"]["balanced"]
    assert played["minus_prior"][1] <= played["minus_prior"][0] <= played["minus_prior"][2]
    assert initials(table) != "A" * NUM_GLANCE_CELLS
    # An edited card is refused.
    card["logits"][0][0] += 1.0
    (tmp_path / "table" / "card.json").write_text(json.dumps(card))
    with pytest.raises(AdapterError, match="checksum"):
        load_glance_table(str(tmp_path / "table"))


@pytest.mark.long  # two tiny runs, one of them the LLM's forward and backward passes (~6 min on 2 cores)
def test_both_learners_are_trained_on_the_same_keys_from_the_same_answers(tmp_path):
    """The ablation's premise, checked in play: the same groups ask about the same cells, and while the two
    learners' answers agree their lanes play the same games; and the LLM's step is the recipe's, bit for bit."""
    import optax
    from embedded_common import generator

    from jaxarena.llm.glance_model import GlanceModel
    from jaxarena.llm.lora import LoraConfig, init_adapter
    from jaxarena.llm.tuning.glance import glance_loss, make_update, target_probs, train_glance
    from jaxarena.llm.tuning.losses import option_log_probs

    model = GlanceModel(generator("bf16"), LoraConfig(rank=4, targets=("q", "v")))
    # The table's stock prior is the embedded model's answers, recorded.
    stock = np.asarray(option_log_probs(jax.jit(model.logits)(model.base, None)))
    np.testing.assert_allclose(prior_logits("stock"), stock, atol=1e-5)

    small = dict(steps=2, bots=("aggressive", "balanced"), spawns=4, group=4)
    _, llm = train_glance(GlanceConfig(**small), tmp_path / "llm", model, progress=lambda line: None)
    _, table = train_glance(GlanceConfig(learner="table", **small), tmp_path / "table", progress=lambda line: None)
    for a, b in zip(llm, table, strict=True):
        assert a["asked"] == b["asked"] and sum(a["asked"]) == 4 * 2  # each group asked about one cell
    assert llm[0]["asked"] != llm[1]["asked"] or llm[0]["lane_win"] != llm[1]["lane_win"]  # the steps differ
    for step, (a, b) in enumerate(zip(llm, table, strict=True)):
        before = (llm[step - 1]["table"], table[step - 1]["table"]) if step else ("1" * NUM_GLANCE_CELLS,) * 2
        if before[0] == before[1]:  # the same answers played: the same games, lane for lane
            assert (a["lane_win"], a["reached_groups"]) == (b["lane_win"], b["reached_groups"])
            assert a["informative_groups"] == b["informative_groups"]

    # The LLM learner's update is the recipe's: Adam on the adapter, cross-entropy to the KL-regularized target.
    config = GlanceConfig()
    optimizer = optax.adam(config.lr)
    adapter = init_adapter(model.cfg, model.lora, jax.random.PRNGKey(0))
    advantage = jnp.asarray(np.random.default_rng(0).normal(size=(NUM_GLANCE_CELLS, NUM_TAGS)) * 0.3, jnp.float32)

    @jax.jit
    def by_hand(adapter, opt_state, base):
        target = target_probs(jax.lax.stop_gradient(model.logits(base, None)), advantage, config.beta)
        for _ in range(config.inner_steps):
            grads = jax.grad(lambda a: glance_loss(model.logits(base, a), target))(adapter)
            updates, opt_state = optimizer.update(grads, opt_state, adapter)
            adapter = optax.apply_updates(adapter, updates)
        return adapter

    learned, _, _ = jax.jit(make_update(model, config, optimizer))(
        adapter, optimizer.init(adapter), model.base, advantage
    )
    expected = by_hand(adapter, optimizer.init(adapter), model.base)
    for got, want in zip(jax.tree.leaves(learned), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))

"""Tuning the coder's LLM: the examples, the after-prefix adapter (trained as it generates), SFT, resume, the CLI.

GRPO's loss, its step and its sampler are tested in test_coder_grpo.py.
"""

from __future__ import annotations

import dataclasses
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_coder import FIXTURE, SYSTEM, make_tiny_generator, random_adapter

from jaxarena.coder.language import BASELINES
from jaxarena.coder.loop_config import CODER_TOP_P
from jaxarena.coder.sandbox import check_program
from jaxarena.coder.tuning import examples as X
from jaxarena.coder.tuning.model import CoderModel
from jaxarena.coder.tuning.train import CoderTuneConfig, sft_loss, train_coder
from jaxarena.llm import lora as L
from jaxarena.llm import model as M


@pytest.fixture(scope="module")
def tiny_generator():
    return make_tiny_generator()


# --- the examples ------------------------------------------------------------------------------------


def test_every_variant_passes_the_sandbox_and_its_plan_names_its_changes():
    variants = X.variants()
    assert len({v.name for v in variants}) == len(variants)
    assert {v.name for v in variants if "+" not in v.name} == set(BASELINES)
    for v in variants:
        check_program(v.code)  # raises ProgramError when the sandbox refuses it
        assert v.reply.startswith("```python\n") and v.reply.endswith("\n```")
        for part in v.name.split("+")[1:]:
            if part.startswith("retreat_hurt="):
                assert f"less than {part.split('=')[1]} HP" in v.plan
                assert f"obs.me.hp < {part.split('=')[1]}" in v.code
            if part.startswith("x"):  # scaled constants: the plan quotes the values the code uses
                for name, value, _ in X._CONSTANT.findall(v.code):
                    assert f"{name} = {float(value):g}" in v.plan


def test_scaling_rewrites_the_numbers_the_docstring_quotes():
    scaled, values = X.scale_constants(BASELINES["kite"], 0.5)
    assert values == {"NEAR": 3.0, "FAR": 5.5, "FIRE": 0.4}
    assert "keep 3-5.5 u" in scaled and "6-11" not in scaled


def test_the_split_is_seeded_disjoint_and_keeps_the_baselines_in_training():
    variants = X.variants()
    train, held = X.split(variants, 0.25, seed=3)
    assert {e.name for e in train} & {e.name for e in held} == set()
    assert len(train) + len(held) == len(variants)
    assert set(BASELINES) <= {e.name for e in train}
    assert [e.name for e in X.split(variants, 0.25, seed=3)[1]] == [e.name for e in held]
    assert [e.name for e in X.split(variants, 0.25, seed=4)[1]] != [e.name for e in held]


def test_the_filter_drops_failures_and_keeps_each_family_at_or_above_its_median():
    ex = [X.Example(f"{f}{i}", f, "plan", "code") for f in ("a", "b") for i in range(4)]
    rewards = [-0.5, 0.1, 0.2, 0.3, 0.9, 0.9, 0.1, -1.0]
    kept = [e.name for e in X.keep_scored(ex, rewards)]
    assert kept == ["a2", "a3", "b0", "b1"]


# --- the model: what is trained is what generates ---------------------------------------------------


def test_a_zero_adapter_gives_the_base_models_reply_log_probs(tiny_generator):
    model = CoderModel(tiny_generator, SYSTEM)
    lora = L.LoraConfig(rank=4)
    batch = model.batch([("Plan: rush the bot.", "def policy(obs):\n    return MELEE")])
    zero = model.log_probs(L.init_adapter(model.cfg, lora, jax.random.key(0)), lora, batch)
    base = model.log_probs(None, None, batch)
    np.testing.assert_array_equal(np.asarray(zero), np.asarray(base))
    # The same numbers from the plain, uncached forward over the whole prompt and reply.
    prompt = tiny_generator.tokenizer.encode(tiny_generator.tokenizer.render(SYSTEM, "Plan: rush the bot."))
    suffix = model.suffix_ids("Plan: rush the bot.")
    n_prefix = len(prompt) - len(suffix)
    row = batch.tokens[0][batch.valid[0]].tolist()
    full = np.asarray(
        M.full_forward(
            model.cfg, model.base, jnp.asarray([prompt[:n_prefix] + row]), jnp.ones((1, n_prefix + len(row)), bool)
        )
    )
    logp = jax.nn.log_softmax(full[0], -1)
    where = np.nonzero(batch.reply[0])[0]
    expected = logp[n_prefix + where, batch.targets[0, where]]
    np.testing.assert_allclose(np.asarray(base)[0, where], expected, atol=1e-4)
    chex.assert_shape(base, batch.tokens.shape)
    assert np.all(np.asarray(base)[~batch.reply] == 0.0)


def test_greedy_replies_of_an_after_prefix_adapter_are_the_argmax_of_the_training_path(tiny_generator):
    model = CoderModel(tiny_generator, SYSTEM)
    lora = L.LoraConfig(rank=4)
    adapter = random_adapter(model.cfg, lora, jax.random.key(5))
    user = "Plan: kite the bot with orbs."

    def greedy_and_training_argmax(after_prefix):
        tiny_generator.use_adapter(adapter, lora, after_prefix=after_prefix)
        try:
            (reply,) = tiny_generator.generate([(SYSTEM, user)], temperature=0.0)
        finally:
            tiny_generator.use_adapter(None)
        ids = list(reply.token_ids)
        batch = model.batch([(user, ids)], append_end=False)
        _, logp = model.log_probs(adapter, lora, batch, with_logits=True)
        where = np.nonzero(batch.reply[0])[0]
        return ids, np.asarray(logp)[0, where].argmax(-1).tolist()

    ids, argmax = greedy_and_training_argmax(after_prefix=True)
    assert len(ids) >= 4
    assert argmax[: len(ids)] == ids
    # The training path keeps the base model's prefix cache: an adapter that also rewrote the prefix generates
    # other tokens, so the card's `acts_on` must reach the generator.
    other, _ = greedy_and_training_argmax(after_prefix=False)
    assert other != ids


def test_a_generator_loading_an_after_prefix_adapter_builds_its_prefix_from_the_base(tiny_generator, tmp_path):
    from jaxarena.llm.generate import GGUFGenerator
    from jaxarena.llm.weights import load_model

    lora = L.LoraConfig(rank=4)
    adapter = random_adapter(tiny_generator.cfg, lora, jax.random.key(2))
    card = {"acts_on": L.AFTER_PREFIX}
    path = L.save_adapter(tmp_path / "coder", adapter, lora, base_sha256=tiny_generator.sha256, card=card)
    loaded = load_model(FIXTURE, use_cache=False, float32=True)
    tuned = GGUFGenerator(
        loaded, dtype=jnp.float32, max_new_tokens=4, batch_buckets=(1,), suffix_buckets=(64,), adapter=path
    )
    ids = tuple(tuned.tokenizer.encode(tuned.tokenizer.prefix(SYSTEM)))
    tuned_cache, base_cache = tuned.prefix_cache(ids), tiny_generator.prefix_cache(ids)
    for got, want in zip((*tuned_cache.k, *tuned_cache.v), (*base_cache.k, *base_cache.v), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert L.acts_after_prefix(tuned.adapter)
    with pytest.raises(ValueError, match="acts after the prefix"):
        tuned.full_logits(SYSTEM, "Plan: kite the bot with orbs.")  # its one-weights reference path would be wrong
    tiny_generator.use_adapter(adapter, lora)  # an adapter on every token has that path
    try:
        assert np.isfinite(tiny_generator.full_logits(SYSTEM, "Plan: kite.")).all()
    finally:
        tiny_generator.use_adapter(None)  # the generator is shared by this module's tests


# --- the losses and the trainer ----------------------------------------------------------------------


def test_sft_steps_lower_the_reply_nll(tiny_generator):
    import optax

    model = CoderModel(tiny_generator, SYSTEM)
    lora = L.LoraConfig(rank=4)
    adapter = L.init_adapter(model.cfg, lora, jax.random.key(0))
    batch = model.batch([("Plan: rush.", "def policy(obs):\n    return MELEE")])
    loss_grad = jax.jit(
        jax.value_and_grad(lambda a: sft_loss(model, lora, a, model.base, model.prefix_arrays(), batch))
    )
    opt = optax.adam(1e-2)
    state = opt.init(adapter)
    first, _ = loss_grad(adapter)
    for _ in range(10):
        loss, g = loss_grad(adapter)
        updates, state = opt.update(g, state, adapter)
        adapter = optax.apply_updates(adapter, updates)
    assert float(loss_grad(adapter)[0]) < 0.7 * float(first)


def test_sft_resumes_to_the_same_adapter_as_an_uninterrupted_run(tiny_generator, tmp_path):
    model = CoderModel(tiny_generator, SYSTEM)
    train = [
        X.Example(f"e{i}", "f", f"plan {i}", f"def policy(obs):\n    return {a}")
        for i, a in enumerate(("MELEE", "RANGED", "RETREAT"))
    ]
    held = [X.Example("h", "f", "plan h", "def policy(obs):\n    return MOVE_TO_BOT")]
    config = CoderTuneConfig(method="sft", steps=4, batch=2, lr=1e-2, rank=4, eval_every=2)
    kwargs = dict(reference="ref", task="task", progress=lambda line: None)
    whole = train_coder(config, model, train, held, tmp_path / "whole", **kwargs)
    train_coder(dataclasses.replace(config, steps=2), model, train, held, tmp_path / "split", **kwargs)
    split = train_coder(config, model, train, held, tmp_path / "split", **kwargs)
    a = L.load_adapter(whole, model.cfg, tiny_generator.sha256)
    b = L.load_adapter(split, model.cfg, tiny_generator.sha256)
    assert a.checksum == b.checksum
    assert a.card["acts_on"] == L.AFTER_PREFIX and a.card["kind"] == "coder-adapter"
    history = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [0, 2, 4]
    assert (tmp_path / "whole" / "curves.png").stat().st_size > 0


def test_the_config_refuses_bad_values():
    with pytest.raises(ValueError, match="unknown method"):
        CoderTuneConfig(method="dpo")
    with pytest.raises(ValueError, match="group of at least 2"):
        CoderTuneConfig(method="grpo", group=1)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        CoderTuneConfig(steps=0)
    with pytest.raises(ValueError, match="held_out must be in"):
        CoderTuneConfig(held_out=1.0)
    with pytest.raises(ValueError, match="GRPO's temperature must be > 0"):
        CoderTuneConfig(method="grpo", temperature=0.0)
    assert CoderTuneConfig(method="sft", temperature=0.0).temperature == 0.0  # SFT samples nothing
    with pytest.raises(ValueError, match="draw_seed must be >= 0"):
        CoderTuneConfig(draw_seed=-1)


def test_a_replicate_run_keeps_the_seed_of_the_split_and_draws_with_its_own():
    from jaxarena.coder.tuning.train import _draw

    first, replicate = CoderTuneConfig(seed=0), CoderTuneConfig(seed=0, draw_seed=3)
    assert (first.draws, replicate.draws) == (0, 3) and replicate.seed == first.seed
    # A run without a draw seed records its config as before the field existed, so older runs resume.
    assert "draw_seed" not in first.to_json() and replicate.to_json()["draw_seed"] == 3
    assert not np.array_equal(_draw(20, 4, 0, replicate.draws), _draw(20, 4, 0, first.draws))


def test_the_cli_refuses_a_missing_adapter_in_one_line(capsys, tmp_path):
    from jaxarena.coder.tuning.cli import main

    assert main(["evaluate", "--adapter", "no-such-adapter", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxarena-tune-coder: error:") and "no-such-adapter" in err and err.count("\n") == 1


def test_an_interrupted_train_says_how_to_resume_without_a_traceback(capsys, monkeypatch, tmp_path):
    from jaxarena.coder.tuning import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_train", interrupted)
    allocator = []  # `train` shares one malloc arena between threads; recorded here, not set in this process
    monkeypatch.setattr(cli.host_memory, "keep_freed_memory", lambda *a, **kw: allocator.append(kw) or True)
    assert cli.main(["train", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert err == "jaxarena-tune-coder: interrupted; run the same command again to resume\n"
    assert allocator == [{"one_arena": True}]


def _records(rewards, users=None):
    users = users or [f"plan {i // 2}, candidate {i % 2 + 1}" for i in range(len(rewards))]
    return [
        {"user": u, "reply": "", "reward": r, "status": "ok" if r > -0.5 else "error", "error": None}
        for u, r in zip(users, rewards, strict=True)
    ]


def test_the_paired_comparison_matches_replies_to_the_same_prompts(tmp_path, capsys):
    from jaxarena.coder.tuning.cli import main
    from jaxarena.coder.tuning.evaluate import paired_comparison

    before = _records([-0.5, -0.5, 0.2, 0.6, 0.6, 0.1])
    after = _records([0.4, -0.5, 0.3, 0.6, 0.5, 0.6])
    got = paired_comparison(before, after)
    diff = np.array([0.9, 0.0, 0.1, 0.0, -0.1, 0.5])
    assert got["difference"] == pytest.approx(diff.mean())
    low, high = got["difference_ci95"]
    assert low < diff.mean() < high and high - low == pytest.approx(2 * 2.5706 * diff.std(ddof=1) / np.sqrt(6), 1e-3)
    boot_low, boot_high = got["difference_bootstrap_ci95"]  # the protocol's paired bootstrap: a mean's spread
    assert boot_low < diff.mean() < boot_high
    assert boot_high - boot_low < high - low  # six pairs: the percentile bootstrap is narrower than the t-interval
    assert (got["better"], got["worse"], got["same"]) == (3, 1, 2)
    assert (got["ran_before"], got["ran_after"]) == (4, 5)
    assert 0.0 < got["wilcoxon_p"] <= 1.0
    with pytest.raises(ValueError, match="different prompts"):
        paired_comparison(before, _records([0.0] * 6, users=[f"other {i}" for i in range(6)]))
    for name, records in (("a.json", before), ("b.json", after)):
        (tmp_path / name).write_text(json.dumps({"summary": {}, "replies": records}))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert json.loads(capsys.readouterr().out) == got


def test_an_adapter_for_the_other_job_is_refused_by_name(tiny_generator, tmp_path):
    from jaxarena.llm.adapters import resolve_adapter

    lora = L.LoraConfig(rank=4)
    fresh = L.init_adapter(tiny_generator.cfg, lora, jax.random.key(0))
    coder = L.save_adapter(tmp_path / "c", fresh, lora, base_sha256="x", card={"kind": "coder-adapter"})
    tag = L.save_adapter(tmp_path / "t", fresh, lora, base_sha256="x")
    assert resolve_adapter(str(coder), kind="coder-adapter") == coder.resolve()
    with pytest.raises(L.AdapterError, match="is for the coder's programs"):
        resolve_adapter(str(coder), kind="llm-adapter")
    with pytest.raises(L.AdapterError, match="is for the tag model's choice"):
        resolve_adapter(str(tag), kind="coder-adapter")


@pytest.mark.slow  # one 448-token reply of SmolLM2-135M after its 2.6 k-token prompt (~1-2 min on 2 cores)
def test_the_shipped_coder_adapter_answers_a_held_out_plan_with_a_program_that_compiles():
    from jaxarena import make
    from jaxarena.coder.compile import compile_program
    from jaxarena.coder.extract import extract_code
    from jaxarena.coder.language import reference_text
    from jaxarena.coder.prompts import coder_prompt, task_information
    from jaxarena.llm.adapters import resolve_adapter
    from jaxarena.llm.generate import GGUFGenerator

    _, params = make("Arena-v0", scenario="paper")
    _, held = X.split(X.variants(), 0.25, seed=0)
    prompt = coder_prompt(reference_text(), task_information(params, "paper", 1000), held[0].plan, 1, 2)
    generator = GGUFGenerator(
        max_new_tokens=448,
        batch_buckets=(1,),
        suffix_buckets=(128, 256),
        adapter=resolve_adapter("smollm2-coder-sft", kind="coder-adapter"),
    )
    (reply,) = generator.generate([(prompt.system, prompt.user)], temperature=0.0)
    code = extract_code(reply.text)
    assert code is not None, reply.text
    compile_program(code)  # raises ProgramError if the sandbox or the compiler refuses it


def test_the_shipped_grpo_coder_adapter_loads_for_the_embedded_model():
    from jaxarena.llm.adapters import resolve_adapter
    from jaxarena.llm.generate import GGUFGenerator

    generator = GGUFGenerator(max_new_tokens=4)
    directory = resolve_adapter("smollm2-coder-grpo", kind="coder-adapter")
    loaded = L.load_adapter(directory, generator.cfg, generator.sha256)
    assert L.acts_after_prefix(loaded) and loaded.card["config"]["init_from"] == "smollm2-coder-sft"
    assert loaded.lora.rank == 8 and len(loaded.adapter) == generator.cfg.n_layers
    # The rule its groups were drawn with, and its log-probs taken under: the generator's and the loop's.
    assert loaded.card["sampler"] == {"top_k": generator.top_k, "top_p": CODER_TOP_P}


def test_evaluate_refuses_plans_the_adapter_was_trained_on(capsys, tmp_path):
    from jaxarena.coder.tuning.cli import main

    # The shipped adapter was trained with seed 0; seed 5 holds out other variants, some of them trained on.
    assert main(["evaluate", "--adapter", "smollm2-coder-sft", "--seed", "5", "--out", str(tmp_path / "e.json")]) == 2
    err = capsys.readouterr().err
    assert "was trained on" in err and err.count("\n") == 1

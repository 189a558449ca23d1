"""The embedded JAX SmolLM2 against llama.cpp, and its cache/batching paths.

Reference numbers come from llama.cpp (tools/make_llm_reference.py). llama.cpp
multiplies the Q4_1 weights with 8-bit-quantized activations and we use bf16
weights and activations, so logits agree to a few tenths, not exactly; the
tight checks (cache vs no cache, batching) run in float32, where any masking or
position bug shows up as an error far above the tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
from embedded_common import generator, loaded, reference

from jaxarena.llm.prompt import SYSTEM

LLAMA_CPP_TOL = 0.6  # max |logit difference| for the digit tokens
TIGHT_TOL = 2e-3  # float32 paths that must agree up to summation order

STATES = [
    "Enemy bot HP: 245/300. Average NPC HP: 41/60. NPCs alive: 4/5. Bot moving: yes. Nearest NPC distance: 6.3 units.",
    "Enemy bot HP: 12/300. Average NPC HP: 59/60. NPCs alive: 5/5. Bot moving: no. Nearest NPC distance: 0.7 units.",
    "Enemy bot HP: 300/300. Average NPC HP: 3/60. NPCs alive: 1/5. Bot moving: yes. Nearest NPC distance: 31.9 units.",
    "Enemy bot HP: 150/300. Average NPC HP: 30/60. NPCs alive: 3/5. Bot moving: no. Nearest NPC distance: 12.0 units.",
    "Enemy bot HP: 88/300. Average NPC HP: 17/60. NPCs alive: 2/5. Bot moving: yes. Nearest NPC distance: 4.4 units.",
    "Enemy bot HP: 201/300. Average NPC HP: 44/60. NPCs alive: 5/5. Bot moving: no. Nearest NPC distance: 19.5 units.",
    "Enemy bot HP: 0/300. Average NPC HP: 60/60. NPCs alive: 5/5. Bot moving: no. Nearest NPC distance: 8.8 units.",
    "Bot moving: yes.",  # much shorter: lots of left padding in the same bucket
]
# Same token length class as SYSTEM (same prefix bucket), different words.
OTHER_SYSTEM = SYSTEM.replace("a squad of NPC soldiers", "a team of robot guards")


def test_config_comes_from_gguf_metadata():
    cfg = loaded().config
    assert (cfg.n_layers, cfg.d_model, cfg.d_ff) == (30, 576, 1536)
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.vocab_size) == (9, 3, 64, 49152)
    assert cfg.rope_base == 100000.0


@pytest.fixture(scope="module")
def ref_logits():
    """Our bf16 first-step logits for every llama.cpp logits case, in one batch."""
    cases = reference()["logits"]
    gens = generator().generate([(c["system"], c["user"]) for c in cases], return_logits=True)
    return cases, [g.first_logits for g in gens]


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_digit_logits_match_llama_cpp(ref_logits):
    cases, ours = ref_logits
    worst = 0.0
    for case, lg in zip(cases, ours, strict=True):
        diff = np.abs(lg[case["digit_ids"]] - np.asarray(case["digit_logits"]))
        worst = max(worst, float(diff.max()))
    assert worst < LLAMA_CPP_TOL, worst


def test_best_digit_matches_llama_cpp(ref_logits):
    cases, ours = ref_logits
    for case, lg in zip(cases, ours, strict=True):
        assert int(np.argmax(lg[case["digit_ids"]])) == int(np.argmax(case["digit_logits"]))


def test_llama_cpp_top5_logits_match(ref_logits):
    cases, ours = ref_logits
    for case, lg in zip(cases, ours, strict=True):
        diff = np.abs(lg[case["top5_ids"]] - np.asarray(case["top5_logits"]))
        assert diff.max() < LLAMA_CPP_TOL, diff
        # llama.cpp's best token is among our top 3 (its top-3 are within ~0.2).
        assert case["top5_ids"][0] in np.argsort(-lg)[:3]


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_prefix_cache_path_equals_full_forward_f32():
    gen = generator("float32")
    outs = gen.generate([(SYSTEM, s) for s in STATES[6:8]], return_logits=True)
    for state, out in zip(STATES[6:8], outs, strict=True):
        full = gen.full_logits(SYSTEM, state)
        assert np.abs(out.first_logits - full).max() < TIGHT_TOL


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_batching_and_padding_do_not_change_a_prompt_f32():
    gen = generator("float32")
    alone = gen.generate([(SYSTEM, STATES[7])], return_logits=True)[0]
    # Neighbours of other lengths change the left padding, and a different
    # system prompt puts one prompt in a second prefix group.
    batch = [(SYSTEM, STATES[0]), (SYSTEM, STATES[1]), (SYSTEM, STATES[7]), (OTHER_SYSTEM, STATES[3])]
    together = gen.generate(batch, return_logits=True)
    assert np.abs(together[2].first_logits - alone.first_logits).max() < TIGHT_TOL
    assert together[2].token_ids == alone.token_ids
    other = gen.generate([(OTHER_SYSTEM, STATES[3])], return_logits=True)[0]
    assert np.abs(together[3].first_logits - other.first_logits).max() < TIGHT_TOL
    # ... and the prefix really matters: a different system prompt changes logits.
    same_user = gen.generate([(SYSTEM, STATES[3])], return_logits=True)[0]
    assert np.abs(same_user.first_logits - other.first_logits).max() > 0.5


def test_sampling_is_reproducible_and_batch_independent():
    gen = generator()
    prompts = [(SYSTEM, s) for s in STATES]  # 8 prompts: the batch-8 program
    first = gen.generate(prompts)
    again = gen.generate(prompts)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    # Same shapes, different neighbours and order: the per-prompt key is a hash
    # of the prompt text, so each prompt's reply is unchanged.
    shuffled = gen.generate(prompts[::-1])[::-1]
    assert [g.text for g in shuffled] == [g.text for g in first]


def test_replies_are_short_text():
    gen = generator()
    for g in gen.generate([(SYSTEM, s) for s in STATES]):
        assert g.error is None
        assert 1 <= len(g.token_ids) <= gen.max_new_tokens
        # A reply shorter than the limit ended on a stop token, which it names (and does not include).
        assert (g.stop_id is None) == (len(g.token_ids) == gen.max_new_tokens)
        assert g.stop_id is None or g.stop_id in gen.tokenizer.stop_ids
        assert isinstance(g.text, str) and g.text


def test_greedy_equals_argmax_of_first_logits():
    gen = generator()
    outs = gen.generate([(SYSTEM, s) for s in STATES], temperature=0.0, return_logits=True)
    for g in outs:
        assert g.token_ids[0] == int(np.argmax(g.first_logits))


def test_sampler_respects_top_p_and_temperature():
    import jax
    import jax.numpy as jnp

    from jaxarena.llm.programs import sample_token

    logits = jnp.array([5.0, 4.9, 1.0, 0.0, -3.0])
    keys = jax.random.split(jax.random.key(0), 400)
    draw = jax.jit(jax.vmap(lambda k, t, p: sample_token(logits, k, t, p, 5), in_axes=(0, None, None)))
    # top_p = 0.5: only the best token survives.
    assert set(np.asarray(draw(keys, 1.0, 0.5)).tolist()) == {0}
    # Temperature 0.1, top_p 0.9: the two near-tied tokens share the draws.
    assert set(np.asarray(draw(keys, 0.1, 0.9)).tolist()) == {0, 1}
    # Temperature 0 is greedy.
    assert set(np.asarray(draw(keys, 0.0, 0.9)).tolist()) == {0}


def test_duplicate_prompts_are_computed_once_and_agree():
    gen = generator()
    # 8 distinct prompts (the batch-8 program) with repeats mixed in.
    prompts = [(SYSTEM, s) for s in STATES] + [(SYSTEM, STATES[0]), (SYSTEM, STATES[5])] * 2
    outs = gen.generate(prompts)
    assert len(outs) == len(prompts)
    assert outs[0] is outs[8] is outs[10] and outs[5] is outs[9] is outs[11]
    assert [g.token_ids for g in outs[:8]] == [g.token_ids for g in gen.generate(prompts[:8])]

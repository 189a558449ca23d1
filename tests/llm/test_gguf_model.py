"""The gguf backend's llama (Mistral layout) and qwen2 forward passes against HF transformers.

The fixtures are tiny synthetic GGUFs with random weights over ten tensor types
(tools/make_gguf_fixtures.py; docs/llm.md says where each number comes from).
With the dequantized weights kept in float32 our logits must equal
transformers' float32 logits up to summation order; the default bf16 path
must stay close and pick the same tokens.
"""

from __future__ import annotations

import hashlib

import gguf
import numpy as np
import pytest
from gguf_common import ARCHS, generator, gguf_path, reference

from jaxarena.llm.dequantize import SUPPORTED_TENSOR_TYPES
from jaxarena.llm.prompt import SYSTEM

F32_TOL = 1e-3  # measured ~1e-5: float32 on both sides, different summation order
BF16_TOL = 0.2  # measured ~0.06: weights rounded to bf16 (logits spread ~2.4)


def _ref_logits(arch):
    return [np.asarray(c["logits"], np.float32) for c in reference(arch)["chat"]]


def test_fixtures_match_their_reference_and_cover_every_tensor_type():
    seen = set()
    for arch in ARCHS:
        digest = hashlib.sha256(gguf_path(arch).read_bytes()).hexdigest()
        assert digest == reference(arch)["gguf_sha256"], f"regenerate the {arch} reference"
        assert reference(arch)["chat"][0]["system"] == SYSTEM
        reader = gguf.GGUFReader(str(gguf_path(arch)))
        seen |= {t.tensor_type.name for t in reader.tensors}
    assert seen == set(SUPPORTED_TENSOR_TYPES)


@pytest.mark.parametrize("arch", ARCHS)
def test_prompt_text_and_token_ids_match_transformers(arch):
    tok = generator(arch).tokenizer
    for case in reference(arch)["chat"]:
        text = tok.render(case["system"], case["user"])
        assert text == case["text"]
        assert tok.encode(text) == case["ids"]
    for case in reference(arch)["raw"]:
        assert tok.encode(case["text"]) == case["ids"], case["text"]


@pytest.mark.parametrize("arch", ARCHS)
def test_float32_logits_match_transformers(arch):
    gen = generator(arch, "f32")
    cases = reference(arch)["chat"]
    outs = gen.generate([(c["system"], c["user"]) for c in cases], return_logits=True)
    for case, out, ref in zip(cases, outs, _ref_logits(arch), strict=True):
        assert out.error is None
        assert np.abs(out.first_logits - ref).max() < F32_TOL
        # The uncached reference path agrees too (so the prefix cache is not hiding anything).
        assert np.abs(gen.full_logits(case["system"], case["user"]) - ref).max() < F32_TOL


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_bf16_logits_are_close_and_greedy_tokens_match_transformers(arch):
    gen = generator(arch, "bf16")
    cases = reference(arch)["chat"]
    outs = gen.generate([(c["system"], c["user"]) for c in cases], temperature=0.0, return_logits=True)
    for case, out, ref in zip(cases, outs, _ref_logits(arch), strict=True):
        assert np.abs(out.first_logits - ref).max() < BF16_TOL
        expected = []
        for t in case["greedy_ids"]:
            if t in gen.tokenizer.stop_ids:
                break
            expected.append(t)
        assert list(out.token_ids) == expected


@pytest.mark.parametrize("arch", ARCHS)
def test_choice_decoding_reads_the_reply_start(arch):
    gen = generator(arch, "f32")
    lead, option_ids = gen.option_tokens()
    # Mistral-style vocabularies spell " 2" as "▁", "2": the shared "▁" is fed first.
    assert (len(lead) == 1) == (arch == "llama")
    cases = reference(arch)["chat"]
    outs = gen.choose([(c["system"], c["user"]) for c in cases], temperature=0.0)
    for case, out in zip(cases, outs, strict=True):
        ids = case["ids"] + list(lead)
        toks = np.zeros((1, 256), np.int32)
        toks[0, : len(ids)] = ids
        full = np.asarray(gen._full(gen.params, toks, (np.arange(256) < len(ids))[None]))[0, len(ids) - 1]
        expected = np.exp(full[option_ids] - full[option_ids].max())
        np.testing.assert_allclose(out.probs, expected / expected.sum(), atol=1e-4)
        assert out.text == str(int(np.argmax(full[option_ids])))
        assert out.token_ids == tuple(lead) + (int(option_ids[int(out.text)]),)
        if not lead:  # qwen2: the reply's first position is transformers' own
            ref = np.asarray(case["logits"])[option_ids]
            np.testing.assert_allclose(out.probs, np.exp(ref - ref.max()) / np.exp(ref - ref.max()).sum(), atol=1e-3)


@pytest.mark.parametrize("arch", ARCHS)
def test_wrong_qk_layout_would_be_caught(arch):
    """Using the other architecture's Q/K row order moves the logits far past the tolerance."""
    import jax.numpy as jnp

    from jaxarena.llm import dequantize
    from jaxarena.llm import weights as W
    from jaxarena.llm.generate import GGUFGenerator

    loaded = W.load_model(gguf_path(arch), use_cache=False, float32=True)
    cfg = loaded.config
    for key, heads in (("wq", cfg.n_heads), ("wk", cfg.n_kv_heads)):
        w = loaded.weights[key]
        # (L, in, out): permute the output rows per layer as the llama loader would (or would not).
        loaded.weights[key] = np.stack([dequantize._unpermute_qk(layer.T, heads).T for layer in w])
    gen = GGUFGenerator(loaded, dtype=jnp.float32, batch_buckets=(1,), suffix_buckets=(256,))
    case = reference(arch)["chat"][0]
    diff = np.abs(gen.full_logits(case["system"], case["user"]) - _ref_logits(arch)[0]).max()
    assert diff > 50 * F32_TOL

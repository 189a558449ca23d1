"""Choice decoding: option tokens from the tokenizer, seeded choices, the model's probabilities, end to end."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest
from embedded_common import generator
from llm_servers import digit_server  # noqa: F401 - pytest fixtures

from jaxarena.llm.backends.embedded import EmbeddedBackend
from jaxarena.llm.backends.ollama import OllamaBackend
from jaxarena.llm.cache import PromptCache, cache_key
from jaxarena.llm.choice import TAG_OPTIONS, choose_option, entropy_bits, option_token_ids, softmax
from jaxarena.llm.prompt import build_prompt, parse_tag
from jaxarena.llm.selector import TagSelector
from jaxarena.llm.testing.server import format_choices
from jaxarena.protocol.stats import choice_probabilities

PROMPTS = [build_prompt(300 - 37 * i, 60 - 7 * i, 5 - i % 5, i % 2, 25.0 - 3.1 * i) for i in range(6)]


def test_option_tokens_come_from_the_tokenizer():
    tok = generator().tokenizer
    ids = option_token_ids(tok.encode)
    assert len(set(ids.tolist())) == 4
    assert [tok.decode([int(i)]) for i in ids] == list(TAG_OPTIONS)
    with pytest.raises(ValueError, match="exactly 1"):
        option_token_ids(tok.encode, ("0", "Surround"))


def test_choose_option_is_seeded_greedy_at_zero_and_follows_the_nucleus():
    logits = np.log(np.array([0.1, 0.6, 0.2, 0.1]))
    assert choose_option(logits, 0.0, 0.9, np.array([1, 2], np.uint32)) == 1
    key = np.array([7, 9], np.uint32)
    assert len({choose_option(logits, 1.0, 1.0, key) for _ in range(5)}) == 1  # the same key, the same choice
    draws = np.array([choose_option(logits, 1.0, 1.0, np.array([k, 3], np.uint32)) for k in range(4000)])
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / 4000, [0.1, 0.6, 0.2, 0.1], atol=0.03)
    # top_p 0.7 keeps "1" (0.6 before it: 0) and "2" (0.6 < 0.7), never the 0.1 tails.
    kept = {choose_option(logits, 1.0, 0.7, np.array([k, 4], np.uint32)) for k in range(500)}
    assert kept == {1, 2}
    # Temperature first, then the nucleus: at 0.5, "1" holds 0.86 of the mass and alone passes top_p 0.7.
    assert {choose_option(logits, 0.5, 0.7, np.array([k, 5], np.uint32)) for k in range(500)} == {1}
    assert choose_option(logits, 1.0, 0.0, key) == 1  # top_p 0 still keeps the best option
    assert entropy_bits(np.full(4, 0.25)) == pytest.approx(2.0) and entropy_bits(np.eye(4)[0]) == 0.0


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_generator_choice_probs_match_the_reference_forward():
    pairs = [(p.system, p.user) for p in PROMPTS]
    # float32: the batched, left-padded, prefix-cached pass must equal the plain uncached one.
    exact = generator("float32")
    ids = option_token_ids(exact.tokenizer.encode)
    for (system, user), g in zip(pairs, exact.choose(pairs, temperature=0.0), strict=True):
        np.testing.assert_allclose(g.probs, softmax(exact.full_logits(system, user)[ids]), atol=1e-3)
    gen = generator()
    out = gen.choose(pairs, temperature=0.0)
    for (system, user), g in zip(pairs, out, strict=True):
        assert g.error is None and g.text in TAG_OPTIONS and len(g.probs) == 4
        assert sum(g.probs) == pytest.approx(1.0, abs=1e-6)
        np.testing.assert_allclose(g.probs, softmax(gen.full_logits(system, user)[ids]), atol=0.03)  # bf16
        assert g.text == str(int(np.argmax(g.probs)))  # temperature 0: the most probable tag
    # A prompt gets the same choice and probabilities whatever batch it is in.
    alone = gen.choose(pairs[2:3])[0]
    in_batch = gen.choose(pairs)[2]
    assert alone.text == in_batch.text and np.allclose(alone.probs, in_batch.probs, atol=1e-2)


def test_embedded_backend_decodes_by_choice_by_default():
    backend = EmbeddedBackend(max_batch=8, generator=generator())
    assert backend.decode == "choice"
    replies = backend.generate_sync(PROMPTS)
    for reply in replies:
        tag, reason = parse_tag(reply, previous=0)
        assert reason is None and reply.text == str(tag) and len(reply.probs) == 4
    free = EmbeddedBackend(decode="free", max_batch=8, generator=generator()).generate_sync(PROMPTS[:2])
    assert all(r.probs is None and r.error is None for r in free)
    with pytest.raises(ValueError, match="decode"):
        EmbeddedBackend(decode="beam")


def test_selector_logs_probs_and_caches_them(tmp_path):
    cache = tmp_path / "cache.jsonl"
    feats = np.array([[300, 60, 5, 0, 20.0], [150, 30, 3, 1, 2.5]], np.float32)
    backend = EmbeddedBackend(max_batch=8, generator=generator())
    with TagSelector(backend, cache_path=cache) as first:
        tags = first.select(feats, np.zeros(2, np.int32), np.zeros(2, bool), 0.0)
    with TagSelector(backend, cache_path=cache) as second:
        again = second.select(feats, np.zeros(2, np.int32), np.zeros(2, bool), 0.0)
    np.testing.assert_array_equal(tags, again)
    assert second.stats.cache_hits == 2 and second.stats.llm_requests == 0
    for a, b in zip(first.records, second.records, strict=True):
        assert a["decode"] == b["decode"] == "choice" and a["fallback"] is None
        assert a["probs"] == b["probs"] and len(a["probs"]) == 4  # the cache keeps what the model preferred
        assert a["tag"] == int(a["reply"])
    assert all("probs" in json.loads(line) for line in cache.read_text().splitlines())
    assert len(PromptCache(cache)) == 2
    # A choice is cached apart from a free reply to the same prompt; free keys are the old ones.
    assert cache_key("embedded", "m", PROMPTS[0], {"t": 1}, "choice") != cache_key(
        "embedded", "m", PROMPTS[0], {"t": 1}
    )


def test_format_schema_is_checked_like_ollama():
    assert format_choices(None) is None
    assert format_choices({"type": "integer", "enum": [0, 1, 2, 3]}) == (0, 1, 2, 3)
    for bad in ("yaml", {"type": "string"}, {"type": "integer", "enum": []}, {"type": "integer", "enum": [1, True]}):
        with pytest.raises(ValueError):
            format_choices(bad)


def test_test_server_honours_format_and_rejects_a_malformed_one(digit_server):  # noqa: F811
    def post(body):
        request = urllib.request.Request(
            digit_server.url + "/api/chat", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    messages = [{"role": "system", "content": PROMPTS[0].system}, {"role": "user", "content": PROMPTS[0].user}]
    model = digit_server.stats()["models"][0]
    reply = post({"model": model, "messages": messages, "format": {"type": "integer", "enum": [2, 3]}})
    assert reply["message"]["content"] in ("2", "3")
    with pytest.raises(urllib.error.HTTPError) as err:
        post({"model": model, "messages": messages, "format": {"type": "integer", "enum": "0123"}})
    assert err.value.code == 400 and "invalid format" in json.loads(err.value.read())["error"]

    replies = OllamaBackend(model, digit_server.url, decode="choice").generate_sync(PROMPTS)
    assert all(r.error is None and r.text in TAG_OPTIONS and r.probs is None for r in replies)
    assert digit_server.stats()["last_request"]["format"] == {"type": "integer", "enum": [0, 1, 2, 3]}


def test_choice_probabilities_summary():
    s = choice_probabilities([[0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]])
    assert s["n"] == 2 and s["top1"] == [1, 1, 0, 0]  # a tie counts for the first tag
    np.testing.assert_allclose(s["mean"], [0.175, 0.425, 0.225, 0.175])
    assert s["entropy_bits"] == pytest.approx((entropy_bits(np.array([0.1, 0.6, 0.2, 0.1])) + 2.0) / 2)
    assert choice_probabilities([])["n"] == 0

"""The test server's default responder: the embedded JAX model, answering over HTTP.

The reference is the same backend run in this process: sampling is seeded per
prompt text, so the server must send back exactly the text that
`EmbeddedBackend` generates here for the same prompt, and every tag and
fallback must be `parse_tag`'s verdict on that text. The small model mostly
answers with words, so most decisions are fallbacks; these checks hold
whichever way it answers.

Slow (the model loads and compiles in the server process and here, ~30-60 s
each on 2 CPU cores), so it is marked `slow`: run with `pytest -m slow`.
"""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest

from jaxarena.llm.backends.ollama import OllamaBackend
from jaxarena.llm.prompt import build_prompt, parse_tag
from jaxarena.llm.selector import TagSelector
from jaxarena.llm.testing import ServerProcess
from jaxarena.llm.types import Prompt
from jaxarena.names import FALLBACK_REASONS, NUM_TAGS

pytestmark = pytest.mark.slow

# The server's responder generates with one slot, i.e. `EmbeddedBackend(decode="free", max_batch=1)`.
SLOTS = 1


@pytest.fixture(scope="module")
def model_server():
    pytest.importorskip("jaxarena.llm.backends.embedded")
    # One slot: batches of one, so the server compiles a single program.
    with ServerProcess(slots=SLOTS, ready_timeout_s=600) as server:  # default responder: the real model
        yield server


@pytest.fixture(scope="module")
def in_process():
    """`prompt -> text`: what the server's responder generates, computed here."""
    from jaxarena.llm.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend(decode="free", max_batch=SLOTS)
    texts: dict[Prompt, str] = {}

    def reply_text(prompt: Prompt) -> str:
        if prompt not in texts:
            (reply,) = backend.generate_sync([prompt])
            assert reply.error is None, reply.error
            texts[prompt] = reply.text
        return texts[prompt]

    return reply_text


def test_real_model_replies_through_the_ollama_client(model_server, in_process):
    stats = model_server.stats()
    assert stats["responder"] == "embedded"
    model = stats["models"][0]
    backend = OllamaBackend(model, model_server.url, concurrency=2)
    backend.check_sync()
    prompts = [build_prompt(300 - 40 * i, 60 - 9 * i, 5 - i, i % 2, 12.0 - 2.5 * i) for i in range(3)]

    replies = backend.generate_sync(prompts)
    assert [r.error for r in replies] == [None] * 3
    # The model's own words, unchanged by HTTP and the ollama client, and for the right prompt.
    assert [r.text for r in replies] == [in_process(p) for p in prompts]
    after = model_server.stats()
    assert after["completed"] == 3 and after["last_request"]["options"] == {
        "num_predict": 3,
        "temperature": 0.1,
        "top_p": 0.9,
    }


def test_structured_output_is_the_models_choice(model_server):
    """`decode="choice"` sends Ollama's `format`; the server's model answers as choice decoding does here."""
    from jaxarena.llm.backends.embedded import EmbeddedBackend

    model = model_server.stats()["models"][0]
    backend = OllamaBackend(model, model_server.url, decode="choice")
    prompts = [build_prompt(300 - 90 * i, 60 - 15 * i, 5 - i, i % 2, 20.0 - 6 * i) for i in range(3)]

    replies = backend.generate_sync(prompts)
    expected = EmbeddedBackend(decode="choice", max_batch=SLOTS).generate_sync(prompts)
    assert [r.text for r in replies] == [e.text for e in expected]
    assert all(parse_tag(r, 0)[1] is None for r in replies)  # a digit, never a fallback
    assert model_server.stats()["last_request"]["format"] == {"type": "integer", "enum": [0, 1, 2, 3]}
    # A narrower enum constrains the model to it, as Ollama's grammar would: "1", its favourite, is not allowed.
    body = {
        "model": model,
        "messages": [{"role": "system", "content": prompts[0].system}, {"role": "user", "content": prompts[0].user}],
        "format": {"type": "integer", "enum": [0, 2, 3]},
        "stream": False,
    }
    request = urllib.request.Request(model_server.url + "/api/chat", json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=120) as response:
        text = json.loads(response.read())["message"]["content"]
    generator = EmbeddedBackend(decode="choice", max_batch=SLOTS).load()
    (expected_narrow,) = generator.choose([(prompts[0].system, prompts[0].user)], ("0", "2", "3"))
    assert text == expected_narrow.text and text in ("0", "2", "3")


def test_selector_with_the_real_model(model_server, in_process, tmp_path):
    model = model_server.stats()["models"][0]
    feats = np.array([[300, 60, 5, 0, 20.0], [150, 30, 3, 1, 2.5], [300, 60, 5, 0, 20.0]], np.float32)
    prev = np.array([1, 2, 3], np.int32)
    with TagSelector(OllamaBackend(model, model_server.url), log_path=tmp_path / "d.jsonl") as selector:
        tags = selector.select(feats, prev, np.zeros(3, bool), 0.0)
    assert selector.stats.llm_requests == 2  # the repeated state was asked once
    records = selector.records
    assert [r["episode"] for r in records] == [0, 1, 2] and [r["shared"] for r in records] == [False, False, True]
    texts = [in_process(build_prompt(*row)) for row in feats.astype(np.float64)]
    assert [r["reply"] for r in records] == texts and [r["error"] for r in records] == [None] * 3
    # Each tag and fallback is the parser's verdict on that episode's reply, against its own previous tag.
    verdicts = [parse_tag(text, int(p)) for text, p in zip(texts, prev, strict=True)]
    assert [(r["tag"], r["fallback"]) for r in records] == verdicts
    np.testing.assert_array_equal(tags, [tag for tag, _ in verdicts])
    assert selector.stats.fallback_total == sum(reason is not None for _, reason in verdicts)


def test_default_selector_runs_the_embedded_model_inside_the_jitted_rollout(tmp_path):
    """No server at all: the default backend, called through io_callback from the scan."""
    pytest.importorskip("jaxarena.llm.backends.embedded")
    import jax

    import jaxarena
    from jaxarena.llm.rollout import rollout_with_llm

    env, params = jaxarena.make("Arena-v0", bot="balanced")

    def policy(p, obs, key):
        return jax.random.randint(key, (5,), 0, 6)

    with TagSelector(log_path=tmp_path / "d.jsonl") as selector:
        assert selector.backend.name == "embedded" and selector.backend.decode == "choice"
        result = rollout_with_llm(env, params, policy, None, jax.random.key(0), selector, num_episodes=4, num_periods=2)
    assert selector.stats.calls == 2 and selector.stats.errors == 0
    assert len(selector.records) == int(np.asarray(result.decision_active).sum())
    for record in selector.records:
        assert record["model"] == selector.backend.model and record["error"] is None
        assert 0 <= record["tag"] < NUM_TAGS and record["fallback"] in (None, *FALLBACK_REASONS)
        assert (record["tag"], record["fallback"]) == parse_tag(record["reply"], record["prev_tag"])
        # Choice decoding: every decision is the model's own pick, with its probabilities.
        assert record["fallback"] is None and record["decode"] == "choice"
        assert len(record["probs"]) == NUM_TAGS and abs(sum(record["probs"]) - 1.0) < 1e-4

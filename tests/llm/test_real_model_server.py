"""The test server's default responder: the embedded JAX model, answering over HTTP.

Slow (the model loads and compiles in the server process, ~30-60 s on 2 CPU
cores), so it is marked `slow`: run with `pytest -m slow`.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from jaxarena.llm.backends.ollama import OllamaBackend
from jaxarena.llm.prompt import build_prompt, parse_tag
from jaxarena.llm.selector import TagSelector
from jaxarena.llm.testserver import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_server():
    pytest.importorskip("jaxarena.llm.backends.embedded")
    # One slot: batches of one, so the server compiles a single program.
    with ServerProcess(slots=1, ready_timeout_s=600) as server:  # default responder: the real model
        yield server


def test_real_model_replies_through_the_ollama_client(model_server):
    stats = model_server.stats()
    assert stats["responder"] == "embedded"
    model = stats["models"][0]
    backend = OllamaBackend(model, model_server.url, concurrency=2)
    backend.check_sync()
    prompts = [build_prompt(300 - 40 * i, 60 - 9 * i, 5 - i, i % 2, 12.0 - 2.5 * i) for i in range(3)]

    async def go():
        try:
            return await backend.generate(prompts)
        finally:
            await backend.aclose()

    replies = asyncio.run(go())
    assert [r.error for r in replies] == [None] * 3
    assert all(isinstance(r.text, str) for r in replies)
    for reply in replies:  # whatever the small model says, it parses to a tag or a named fallback
        tag, reason = parse_tag(reply, previous=0)
        assert 0 <= tag <= 3 and reason in (None, "empty", "non_numeric", "out_of_range")
    after = model_server.stats()
    assert after["completed"] == 3 and after["last_request"]["options"] == {
        "num_predict": 3, "temperature": 0.1, "top_p": 0.9}


def test_selector_with_the_real_model(model_server, tmp_path):
    model = model_server.stats()["models"][0]
    feats = np.array([[300, 60, 5, 0, 20.0], [150, 30, 3, 1, 2.5], [300, 60, 5, 0, 20.0]], np.float32)
    with TagSelector(OllamaBackend(model, model_server.url), log_path=tmp_path / "d.jsonl") as selector:
        tags = selector.select(feats, np.array([1, 2, 3], np.int32), np.zeros(3, bool), 0.0)
    assert tags[0] == tags[2] or selector.records[2]["fallback"] is not None
    assert selector.stats.llm_requests == 2  # the repeated state was asked once
    assert all(r["error"] is None for r in selector.records)


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
        assert selector.backend.name == "embedded"
        result = rollout_with_llm(env, params, policy, None, jax.random.key(0), selector,
                                  num_episodes=4, num_periods=2)
    assert selector.stats.calls == 2 and selector.stats.errors == 0
    assert len(selector.records) == int(np.asarray(result.decision_active).sum())
    for record in selector.records:
        assert record["model"] == selector.backend.model
        assert record["fallback"] in (None, "empty", "non_numeric", "out_of_range")

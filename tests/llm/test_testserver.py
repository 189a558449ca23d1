"""The test server itself: API shape, fault stream, slots, restart, control endpoints."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import numpy as np
import ollama
import pytest
from llm_servers import digit_server, server  # noqa: F401 - pytest fixtures

from jaxarena.llm.backends.ollama import OllamaBackend
from jaxarena.llm.prompt import SYSTEM, build_prompt
from jaxarena.llm.selector import TagSelector
from jaxarena.llm.testing import FAULT_KINDS, ServerProcess, hash_digit


def post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_generate_tags_and_version_through_the_official_client(server):
    async def go():
        client = ollama.AsyncClient(host=server.url)
        prompt = build_prompt(120, 30, 3, 1, 4.2)
        gen = await client.generate(
            model="mistral", system=prompt.system, prompt=prompt.user, options={"num_predict": 3}
        )
        chat = await client.chat(
            model="mistral", messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt.user}]
        )
        tags = await client.list()
        return prompt, gen, chat, tags

    prompt, gen, chat, tags = asyncio.run(go())
    assert gen.response == chat.message.content == hash_digit(prompt)
    assert chat.message.role == "assistant"
    assert [m.model for m in tags.models] == ["mistral:latest"]
    with urllib.request.urlopen(server.url + "/api/version", timeout=5) as resp:
        assert "version" in json.loads(resp.read())
    assert server.stats()["by_endpoint"] == {"chat": 1, "generate": 1}


def test_non_2xx_raises_response_error_in_the_client(server):
    server.set_faults(p_http_500=1.0)

    async def go():
        client = ollama.AsyncClient(host=server.url)
        await client.chat(model="mistral", messages=[{"role": "user", "content": "x"}])

    with pytest.raises(ollama.ResponseError) as info:
        asyncio.run(go())
    assert info.value.status_code == 500 and "injected" in info.value.error


def test_fault_counts_are_reproducible_with_a_seed(server):
    settings = dict(p_http_500=0.1, p_garbage=0.1, p_empty=0.1, p_out_of_range=0.1, p_drop=0.1, seed=11)
    counts = []
    for _ in range(2):
        server.set_faults(**settings)
        server.reset()
        asyncio.run(
            OllamaBackend("mistral", server.url, concurrency=6).generate(
                [build_prompt(i, 60, 5, 0, 1.0) for i in range(80)]
            )
        )
        counts.append(server.stats()["faults"])
    assert counts[0] == counts[1]
    assert set(counts[0]) == set(FAULT_KINDS) and sum(counts[0].values()) > 20


def test_bad_fault_settings_are_refused(server):
    assert post(server.url + "/_faults", {"p_garbage": 0.7, "p_empty": 0.7})[0] == 400
    assert post(server.url + "/_faults", {"no_such_fault": 1})[0] == 400
    status, config = post(server.url + "/_faults", {"delay_s": 0.01})
    assert status == 200 and config["delay_s"] == 0.01


def test_unknown_model_is_404(server):
    status, body = post(server.url + "/api/chat", {"model": "llama3", "messages": []})
    assert status == 404 and "not found" in body["error"]


def test_killed_and_restarted_server_recovers_the_selector():
    with ServerProcess(responder="hash-digit", models=["mistral"], ready_timeout_s=60) as server:
        feats = np.array([[300, 60, 5, 0, 9.0], [250, 45, 4, 1, 3.0]], np.float32)
        prev = np.array([1, 2], np.int32)
        with TagSelector(OllamaBackend("mistral", server.url), cache=False) as selector:
            ok = selector.select(feats, prev, np.zeros(2, bool), 0.0)
            port = server.port
            server.kill()
            down = selector.select(feats, prev, np.zeros(2, bool), 5.0)
            server.restart()
            assert server.port == port
            again = selector.select(feats, prev, np.zeros(2, bool), 10.0)
        np.testing.assert_array_equal(down, prev)
        np.testing.assert_array_equal(ok, again)
        assert [r["fallback"] for r in selector.records] == [None, None, "error", "error", None, None]

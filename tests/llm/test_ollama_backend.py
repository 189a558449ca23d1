"""OllamaBackend through the real `ollama` client against the real test-server process.

No mocks: every request crosses a socket to `python -m jaxarena.llm.testing.server`.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from llm_servers import digit_server, free_port, server  # noqa: F401 - pytest fixtures

from jaxarena.llm.backends.ollama import OllamaBackend
from jaxarena.llm.preflight import BackendUnavailable
from jaxarena.llm.prompt import SYSTEM, build_prompt, parse_tag
from jaxarena.llm.testing import GARBAGE_REPLIES, hash_digit
from jaxarena.llm.types import Prompt


def prompts(n: int, offset: int = 0) -> list[Prompt]:
    return [build_prompt(300 - i - offset, 60, 5, i % 2, 1.0 + 0.1 * i) for i in range(n)]


def test_replies_come_from_the_server_with_table_10_request(server):
    batch = prompts(6)
    replies = OllamaBackend("mistral", server.url).generate_sync(batch)
    assert [r.error for r in replies] == [None] * 6
    assert [r.text for r in replies] == [hash_digit(p) for p in batch]
    assert all(r.latency_s > 0 for r in replies)
    stats = server.stats()
    assert stats["by_endpoint"] == {"chat": 6, "generate": 0}
    request = stats["last_request"]
    assert request["options"] == {"num_predict": 3, "temperature": 0.1, "top_p": 0.9}
    assert request["keep_alive"] == "30m"
    assert request["stream"] is False
    assert request["model"] == "mistral"
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][0]["content"] == SYSTEM
    assert request["messages"][1]["content"] in {p.user for p in batch}


def test_host_defaults_to_env_then_localhost(monkeypatch):
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.delenv("OLLAMA_NUM_PARALLEL", raising=False)
    backend = OllamaBackend()
    assert backend.host == "http://127.0.0.1:11434" and backend.concurrency == 4
    assert backend.options == {"num_predict": 3, "temperature": 0.1, "top_p": 0.9}
    assert backend.timeout_s == 40.0
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:5555")
    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "8")
    backend = OllamaBackend()
    assert backend.host == "http://127.0.0.1:5555" and backend.concurrency == 8


def test_env_host_reaches_the_server(server, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", server.url)
    replies = OllamaBackend("mistral").generate_sync(prompts(2))
    assert [r.error for r in replies] == [None, None]


def test_concurrency_is_bounded_by_the_semaphore(server):
    server.set_faults(slots=16, delay_s=0.1)
    start = time.perf_counter()
    replies = OllamaBackend("mistral", server.url, concurrency=3).generate_sync(prompts(12))
    elapsed = time.perf_counter() - start
    assert all(r.error is None for r in replies)
    assert server.stats()["max_in_slots"] == 3
    assert elapsed > 0.35  # at least 4 waves of 0.1 s: never more than 3 at once


def test_server_slots_queue_the_rest(server):
    server.set_faults(slots=2, delay_s=0.1)
    start = time.perf_counter()
    replies = OllamaBackend("mistral", server.url, concurrency=8).generate_sync(prompts(8))
    elapsed = time.perf_counter() - start
    assert all(r.error is None for r in replies)
    assert server.stats()["max_in_slots"] == 2
    assert elapsed > 0.35  # 8 requests, 2 at a time, 0.1 s each


@pytest.mark.parametrize(
    "fault, error_kind, parse_reason",
    [
        ("p_http_500", "http_500", "error"),
        ("p_drop", "disconnect", "error"),
        ("p_garbage", None, "non_numeric"),
        ("p_empty", None, "empty"),
        ("p_out_of_range", None, "out_of_range"),
    ],
)
def test_each_fault_becomes_a_reply_not_an_exception(server, fault, error_kind, parse_reason):
    server.set_faults(**{fault: 1.0})
    replies = OllamaBackend("mistral", server.url).generate_sync(prompts(5))
    assert len(replies) == 5
    for reply in replies:
        if error_kind is None:
            assert reply.error is None
        else:
            assert reply.error is not None and reply.error.split(":")[0] == error_kind, reply.error
        assert parse_tag(reply, previous=2) == (2, parse_reason)
    if fault == "p_garbage":
        assert {r.text for r in replies} <= set(GARBAGE_REPLIES)
    assert server.stats()["faults"][fault[2:]] == 5


def test_timeout_is_enforced_per_request(server):
    server.set_faults(p_timeout=1.0, hang_s=10.0)
    start = time.perf_counter()
    replies = OllamaBackend("mistral", server.url, timeout_s=0.3, concurrency=4).generate_sync(prompts(4))
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0  # the client gave up at 0.3 s; it did not wait for the server's 10 s
    for reply in replies:
        assert reply.error.startswith("timeout"), reply.error
        assert 0.25 < reply.latency_s < 5.0
    assert server.stats()["faults"]["timeout"] == 4


def test_mixed_faults_match_the_server_counts(server):
    server.set_faults(p_http_500=0.2, p_drop=0.1, p_garbage=0.1, p_empty=0.1, p_out_of_range=0.1, seed=7)
    server.reset()
    replies = OllamaBackend("mistral", server.url, concurrency=4).generate_sync(prompts(60))
    faults = server.stats()["faults"]
    kinds = [r.error.split(":")[0] if r.error else parse_tag(r, 0)[1] for r in replies]
    assert kinds.count("http_500") == faults["http_500"]
    assert kinds.count("disconnect") == faults["drop"]
    assert kinds.count("non_numeric") == faults["garbage"]
    assert kinds.count("empty") == faults["empty"]
    assert kinds.count("out_of_range") == faults["out_of_range"]
    assert kinds.count(None) == 60 - sum(faults.values())
    assert sum(faults.values()) > 10  # the fault stream really fired


def test_server_down_gives_error_replies_and_a_clear_check(free_port):
    backend = OllamaBackend("mistral", f"http://127.0.0.1:{free_port}")
    replies = backend.generate_sync(prompts(3))
    assert all(r.error.startswith("connect") for r in replies)
    with pytest.raises(BackendUnavailable, match="ollama serve"):
        backend.check_sync()


def test_check_passes_and_names_missing_models(server):
    OllamaBackend("mistral", server.url).check_sync()  # "mistral" is "mistral:latest"
    OllamaBackend("mistral:latest", server.url).check_sync()
    with pytest.raises(BackendUnavailable, match=r"ollama pull llama3"):
        OllamaBackend("llama3", server.url).check_sync()
    # Without check(), a missing model is an error reply (Ollama answers 404).
    replies = OllamaBackend("llama3", server.url).generate_sync(prompts(1))
    assert replies[0].error.startswith("http_404")


def test_backend_survives_several_event_loops(server):
    backend = OllamaBackend("mistral", server.url)
    first = asyncio.run(backend.generate(prompts(2)))
    second = asyncio.run(backend.generate(prompts(2)))  # a new loop: client must be remade
    assert [r.error for r in first + second] == [None] * 4

"""TagSelector on the host side: skipping, dedup, cache, fallbacks, the decision log.

The backend is the real OllamaBackend talking to the real test-server process,
so "each unique prompt is sent once" is checked on the server's own counters.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from llm_servers import digit_server, free_port, server  # noqa: F401 - pytest fixtures

from jaxarena.llm.backends.ollama import OllamaBackend
from jaxarena.llm.cache import PromptCache, cache_key
from jaxarena.llm.prompt import build_prompt
from jaxarena.llm.selector import TagSelector
from jaxarena.llm.testing import hash_digit
from jaxarena.names import LLM_FEATURES

LOG_FIELDS = {
    "call",
    "episode",
    "time_s",
    "state",
    "prompt_hash",
    "prev_tag",
    "reply",
    "decode",
    "probs",
    "error",
    "tag",
    "fallback",
    "latency_s",
    "cache_hit",
    "shared",
    "backend",
    "model",
}


def features(n: int, distinct: int | None = None) -> np.ndarray:
    """(n, 5) features; with `distinct`, only that many different states, repeated."""
    distinct = n if distinct is None else distinct
    i = np.arange(n) % distinct
    return np.stack(
        [300.0 - 7 * i, 60.0 - (i % 4) * 5, 5.0 - (i % 3), (i % 2).astype(float), 2.0 + 0.3 * i], axis=1
    ).astype(np.float32)


def expected_tags(feats: np.ndarray) -> np.ndarray:
    return np.array([int(hash_digit(build_prompt(*row))) for row in feats.astype(np.float64)])


def test_cache_key_is_stable():
    """The key is what on-disk caches are indexed by: this value must never change."""
    prompt = build_prompt(245, 41.25, 4, 1, 6.3412)
    options = {"num_predict": 3, "temperature": 0.1, "top_p": 0.9}
    assert cache_key("ollama", "mistral", prompt, options) == (
        "e7b9173ac146a69ac0a8c3ec44ed2e002c314a17cc0377de447dacb92bf64b07"
    )
    assert cache_key("ollama", "mistral", prompt, dict(reversed(options.items()))) == cache_key(
        "ollama", "mistral", prompt, options
    )  # option order does not matter
    assert cache_key("ollama", "mistral:latest", prompt, options) != cache_key("ollama", "mistral", prompt, options)


@pytest.fixture
def selector(server, tmp_path):
    sel = TagSelector(OllamaBackend("mistral", server.url), log_path=tmp_path / "decisions.jsonl")
    yield sel
    sel.close()


def read_log(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tags_come_from_the_replies(selector, server):
    feats = features(8)
    prev = np.zeros(8, np.int32)
    tags = selector.select(feats, prev, np.zeros(8, bool), 0.0)
    assert tags.dtype == np.int32 and tags.shape == (8,)
    np.testing.assert_array_equal(tags, expected_tags(feats))
    assert server.stats()["requests"] == 8


def test_done_episodes_are_skipped_and_keep_their_tag(selector, server):
    feats = features(6)
    prev = np.array([3, 2, 1, 0, 3, 2], np.int32)
    done = np.array([True, False, True, False, False, True])
    tags = selector.select(feats, prev, done, 5.0)
    np.testing.assert_array_equal(tags[done], prev[done])
    np.testing.assert_array_equal(tags[~done], expected_tags(feats[~done]))
    assert server.stats()["requests"] == 3
    assert [r["episode"] for r in selector.records] == [1, 3, 4]
    # A call where everything is done asks nothing and logs nothing.
    np.testing.assert_array_equal(selector.select(feats, prev, np.ones(6, bool), 10.0), prev)
    assert server.stats()["requests"] == 3 and len(selector.records) == 3


def test_identical_prompts_are_sent_once(selector, server):
    feats = features(40, distinct=7)
    tags = selector.select(feats, np.zeros(40, np.int32), np.zeros(40, bool), 0.0)
    stats = server.stats()
    assert stats["requests"] == 7
    assert stats["unique_prompts"] == 7 and stats["duplicate_requests"] == 0
    np.testing.assert_array_equal(tags, expected_tags(feats))
    assert selector.stats.unique_prompts == 7 and selector.stats.llm_requests == 7
    assert sum(not r["shared"] for r in selector.records) == 7
    assert len(selector.records) == 40


def test_memory_cache_makes_a_rerun_free(selector, server):
    feats = features(10)
    first = selector.select(feats, np.zeros(10, np.int32), np.zeros(10, bool), 0.0)
    second = selector.select(feats, np.ones(10, np.int32), np.zeros(10, bool), 5.0)
    np.testing.assert_array_equal(first, second)
    assert server.stats()["requests"] == 10
    assert selector.stats.cache_hits == 10
    assert all(r["cache_hit"] for r in selector.records[10:])
    assert not any(r["cache_hit"] for r in selector.records[:10])


def test_disk_cache_survives_a_new_selector(server, tmp_path):
    cache = tmp_path / "cache.jsonl"
    feats = features(12)
    with TagSelector(OllamaBackend("mistral", server.url), cache_path=cache) as sel:
        first = sel.select(feats, np.zeros(12, np.int32), np.zeros(12, bool), 0.0)
    assert server.stats()["requests"] == 12
    with TagSelector(OllamaBackend("mistral", server.url), cache_path=cache) as sel:
        second = sel.select(feats, np.zeros(12, np.int32), np.zeros(12, bool), 0.0)
        assert sel.stats.llm_requests == 0 and sel.stats.cache_hits == 12
    np.testing.assert_array_equal(first, second)
    assert server.stats()["requests"] == 12  # the warm cache made no LLM calls
    # Another model (or options) is another key: nothing is reused.
    with TagSelector(OllamaBackend("mistral:latest", server.url), cache_path=cache) as sel:
        sel.select(feats[:2], np.zeros(2, np.int32), np.zeros(2, bool), 0.0)
    assert server.stats()["requests"] == 14
    assert len(PromptCache(cache)) == 14


def test_cache_off_sends_every_call(server):
    with TagSelector(OllamaBackend("mistral", server.url), cache=False) as sel:
        for _ in range(3):
            sel.select(features(4), np.zeros(4, np.int32), np.zeros(4, bool), 0.0)
    assert server.stats()["requests"] == 12


def test_errors_are_not_cached(selector, server):
    server.set_faults(p_http_500=1.0)
    selector.select(features(3), np.zeros(3, np.int32), np.zeros(3, bool), 0.0)
    server.set_faults(p_http_500=0.0)
    tags = selector.select(features(3), np.zeros(3, np.int32), np.zeros(3, bool), 5.0)
    np.testing.assert_array_equal(tags, expected_tags(features(3)))
    assert server.stats()["requests"] == 6


@pytest.mark.parametrize(
    "fault, reason",
    [
        ("p_garbage", "non_numeric"),
        ("p_empty", "empty"),
        ("p_out_of_range", "out_of_range"),
        ("p_http_500", "error"),
        ("p_drop", "error"),
    ],
)
def test_fallbacks_keep_the_previous_tag(selector, server, fault, reason):
    server.set_faults(**{fault: 1.0})
    prev = np.array([0, 1, 2, 3, 1], np.int32)
    tags = selector.select(features(5), prev, np.zeros(5, bool), 15.0)
    np.testing.assert_array_equal(tags, prev)
    assert selector.stats.fallbacks[reason] == 5 and selector.stats.fallback_total == 5
    assert {r["fallback"] for r in selector.records} == {reason}
    assert [r["tag"] for r in selector.records] == prev.tolist()


def test_server_down_is_a_fallback_not_a_crash(free_port, tmp_path):
    with TagSelector(OllamaBackend("mistral", f"http://127.0.0.1:{free_port}"), log_path=tmp_path / "d.jsonl") as sel:
        prev = np.array([2, 3], np.int32)
        tags = sel.select(features(2), prev, np.zeros(2, bool), 0.0)
    np.testing.assert_array_equal(tags, prev)
    log = read_log(tmp_path / "d.jsonl")
    assert [r["fallback"] for r in log] == ["error", "error"]
    assert all(r["error"].startswith("connect") for r in log)


def test_batch_timeout_bounds_a_call(server):
    server.set_faults(p_timeout=1.0, hang_s=10.0)
    backend = OllamaBackend("mistral", server.url, timeout_s=20.0)
    with TagSelector(backend, batch_timeout_s=0.5) as sel:
        start = time.perf_counter()
        tags = sel.select(features(2), np.array([1, 2], np.int32), np.zeros(2, bool), 0.0)
        assert time.perf_counter() - start < 5.0  # not the server's 10 s, nor the backend's 20 s
    np.testing.assert_array_equal(tags, [1, 2])
    assert sel.stats.fallbacks["error"] == 2


def test_decision_log_is_complete(selector, server, tmp_path):
    server.set_faults(p_garbage=0.3, p_http_500=0.2, seed=3)
    total = 0
    prev = np.zeros(16, np.int32)
    for call in range(5):
        done = np.arange(16) < call * 3  # more episodes finish each period
        prev = selector.select(features(16, distinct=9) + call, prev, done, 5.0 * call)
        total += int((~done).sum())
    log = read_log(tmp_path / "decisions.jsonl")
    assert len(log) == total == selector.stats.decisions
    assert log == selector.records
    for record in log:
        assert set(record) == LOG_FIELDS
        assert set(record["state"]) == set(LLM_FEATURES)
        assert record["backend"] == "ollama" and record["model"] == "mistral"
        if record["fallback"] is None:
            assert record["tag"] == int(record["reply"].lstrip()[0]) and record["error"] is None
        else:
            assert record["tag"] == record["prev_tag"]
            assert (record["fallback"] == "error") == (record["error"] is not None)
    assert [r["time_s"] for r in log] == sorted(r["time_s"] for r in log)
    by_reason = {reason: sum(r["fallback"] == reason for r in log) for reason in selector.stats.fallbacks}
    assert by_reason == selector.stats.fallbacks
    assert selector.stats.fallbacks["error"] > 0 and selector.stats.fallbacks["non_numeric"] > 0


def test_context_fields_are_logged(selector):
    selector.context.update(bot="evasive", combination="B")
    selector.select(features(1), np.zeros(1, np.int32), np.zeros(1, bool), 0.0)
    assert selector.records[0]["bot"] == "evasive" and selector.records[0]["combination"] == "B"


def test_one_event_loop_for_the_whole_run(selector):
    before = threading.active_count()
    selector.select(features(3), np.zeros(3, np.int32), np.zeros(3, bool), 0.0)
    loop = selector._loop.loop
    for call in range(1, 5):
        selector.select(features(3) + call, np.zeros(3, np.int32), np.zeros(3, bool), 5.0 * call)
        assert selector._loop.loop is loop
    assert threading.active_count() <= before + 1


def test_progress_hook_sees_the_counters(server):
    seen = []

    def on_call(stats, done):
        seen.append((stats.decisions, done))

    with TagSelector(OllamaBackend("mistral", server.url), on_call=on_call) as sel:
        sel.select(features(3), np.zeros(3, np.int32), np.zeros(3, bool), 0.0)
        sel.select(features(3), np.zeros(3, np.int32), np.array([True, False, False]), 5.0)
    assert seen == [(3, 0), (5, 1)]  # decisions so far, finished episodes of the batch

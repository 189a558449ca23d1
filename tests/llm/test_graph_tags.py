"""The in-graph LLM tag source: token ids, rounding, choice and records against the host path."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from embedded_common import generator

import jaxarena
from jaxarena.llm.graph_tags import GraphTagSource, choose_options, prompt_key_data
from jaxarena.llm.prompt import SYSTEM, build_prompt
from jaxarena.llm.state_line import StateLineTokens, UnsupportedTokenizer, _half_up, _tenths
from jaxarena.runner import make_runner
from jaxarena.tag_sources import CarryTagSource


def graph_source(dtype_name: str) -> GraphTagSource:
    from jaxarena.llm.backends.embedded import EmbeddedBackend

    return GraphTagSource.from_backend(EmbeddedBackend(generator=generator(dtype_name)))


@pytest.fixture(scope="module")
def source():
    return graph_source("bf16")


@pytest.fixture(scope="module")
def source_f32():
    return graph_source("float32")


def edge_states() -> np.ndarray:
    """0 HP, full HP, .5 HP and .05 distance rounding boundaries (and one float32 ulp either side), big distances."""
    below, above = np.nextafter(np.float32(0.5), 0), np.nextafter(np.float32(0.5), 1)
    rows = [
        [0, 0, 0, 0, 0],
        [300, 60, 5, 1, 42.43],
        [299.5, 59.5, 4.5, 1, 0.05],
        [299.49997, 59.49997, 4.4999995, 0, 0.04999],
        [float(below), float(above), 0.5, 1, 0.25],
        [0.4, 0.6, 1, 0.51, 0.35],
        [10, 9.5, 2, 0.49, 9.95],
        [99.5, 10, 3, 1, 9.949999],
        [100, 0.49, 5, 0, 10.0],
        [150.5, 30.5, 5, 1, 99.95],
        [200, 45, 5, 0, 100.0],
        [250, 12, 1, 1, 100.05],
        [1, 1, 1, 1, 123.45],
        [7, 7, 1, 0, 999.9],
        [-3, -0.2, 0, 0, -1.0],
    ]
    for k in range(0, 4000, 37):  # every x.x5 tie as float32, and its neighbours
        x = np.float32(k / 20)
        rows += [[k % 301, k % 61, k % 6, k % 2, float(v)] for v in (np.nextafter(x, 0), x, np.nextafter(x, 1e9))]
    return np.asarray(rows, np.float32)


def random_states(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = rng.choice([10.0, 45.0, 999.9], n)  # 1, 2 and 3 integer digits
    return np.stack(
        [
            rng.uniform(0, 300, n),
            rng.uniform(0, 60, n),
            rng.integers(0, 6, n),
            rng.integers(0, 2, n),
            rng.uniform(0, scale),
        ],
        axis=-1,
    ).astype(np.float32)


def test_rounding_matches_python_formatting():
    """Whole HP points half up and the distance's one decimal, exactly as format_state writes them."""
    rng = np.random.default_rng(0)
    xs = np.concatenate(
        [
            np.arange(0, 100_000, dtype=np.float32) / np.float32(20),
            rng.uniform(0, 1000, 50_000).astype(np.float32),
            np.float32([0, 1e-30, 1e-8, 0.049999, 0.05, 0.15, 0.25, 0.35, 2.5, 8388607.5, 8388608.0]),
        ]
    )
    xs = np.concatenate([xs, np.nextafter(xs, np.float32(0)), np.nextafter(xs, np.float32(1e9))])
    tenths = np.asarray(jax.jit(_tenths)(jnp.asarray(xs)))
    want = np.asarray([round(float(f"{float(x):.1f}") * 10) for x in xs])
    np.testing.assert_array_equal(tenths, want)
    whole = np.asarray(jax.jit(_half_up)(jnp.asarray(xs)))
    np.testing.assert_array_equal(whole, np.maximum(0, np.floor(xs.astype(np.float64) + 0.5)).astype(np.int64))


def test_token_ids_equal_the_host_paths_on_random_and_edge_states(source):
    states = np.concatenate([edge_states(), random_states(3000, seed=1)])
    tokens, n_pad = jax.jit(source.lines.tokens)(jnp.asarray(states))
    chex.assert_shape(tokens, (len(states), source.lines.length))
    tokens, n_pad = np.asarray(tokens), np.asarray(n_pad)
    bad = []
    for row, feats in enumerate(states):
        prefix, suffix = source.lines.host_suffix(feats.tolist())
        assert prefix == source.lines.prefix_ids
        if tokens[row, n_pad[row] :].tolist() != suffix:
            bad.append((feats.tolist(), build_prompt(*feats.tolist()).user))
    assert not bad, bad[:5]
    # Lengths really vary (1-3 digit numbers), so the padding is exercised.
    assert len(set(n_pad.tolist())) >= 4


def test_a_tokenizer_that_merges_digits_is_refused():
    """A real BPE whose vocabulary has multi-digit tokens: the build-time check names the host path."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="?"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    lines = [build_prompt(b, 41, 4, 1, 6.3).user for b in range(0, 301)] * 3
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=400, special_tokens=["?"]))
    assert len(tok.encode("245").ids) == 1  # the vocabulary really merges digits

    def encode(text):
        return tok.encode(text).ids

    def host_ids(system, user):
        return [], encode(user)

    host_ids.render = lambda system, user: user
    with pytest.raises(UnsupportedTokenizer, match="host path"):
        StateLineTokens(encode, host_ids, SYSTEM)


def test_free_decoding_and_servers_stay_on_the_host_path():
    from jaxarena.llm.backends.embedded import EmbeddedBackend
    from jaxarena.llm.backends.ollama import OllamaBackend

    for backend in (EmbeddedBackend(decode="free"), OllamaBackend("mistral", "http://127.0.0.1:9")):
        with pytest.raises(UnsupportedTokenizer, match="host path"):
            GraphTagSource.from_backend(backend)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_prompt_keys_ignore_padding_and_choice_follows_the_nucleus():
    row = jnp.asarray([5, 6, 7, 8], jnp.int32)
    a = prompt_key_data(jnp.concatenate([jnp.zeros(3, jnp.int32), row])[None], jnp.asarray([3]), 7)
    b = prompt_key_data(jnp.concatenate([jnp.full(6, 99, jnp.int32), row])[None], jnp.asarray([6]), 7)
    c = prompt_key_data(jnp.concatenate([jnp.zeros(3, jnp.int32), row[::-1]])[None], jnp.asarray([3]), 7)
    chex.assert_trees_all_equal(a, b)
    assert not np.array_equal(np.asarray(a), np.asarray(c))
    keys = jax.random.randint(jax.random.key(0), (400, 2), 0, 2**31 - 1).astype(jnp.uint32)
    # One clear winner at T = 0.1: the nucleus is that option alone, whatever the key.
    clear = jnp.tile(jnp.asarray([[0.0, 1.0, 0.5, -1.0]]), (400, 1))
    assert set(np.asarray(choose_options(clear, keys, 0.1, 0.9)).tolist()) == {1}
    # Two equal leaders: both are drawn, the others never.
    tie = jnp.tile(jnp.asarray([[2.0, 0.0, 2.0, -1.0]]), (400, 1))
    drawn = np.asarray(choose_options(tie, keys, 0.1, 0.9))
    assert set(drawn.tolist()) == {0, 2} and 120 < (drawn == 0).sum() < 280
    assert set(np.asarray(choose_options(tie, keys, 0.0, 0.9)).tolist()) == {0}


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_tags_and_probs_match_the_host_path_in_float32(source_f32):
    """Same model in float32: the same choices, and probabilities equal up to summation order."""
    states = np.concatenate([edge_states()[:20], random_states(28, seed=2)])
    tags, aux = source_f32.choose(states)
    chex.assert_shape(aux["logits"], (len(states), 4))
    gens = source_f32.generator.choose([(SYSTEM, build_prompt(*f.tolist()).user) for f in states])
    host_probs = np.asarray([g.probs for g in gens])
    np.testing.assert_allclose(aux["probs"], host_probs, atol=2e-4)
    # The draw is keyed differently from the host's; the choice can differ only where the nucleus has 2+ options.
    tempered = host_probs**10 / (host_probs**10).sum(-1, keepdims=True)
    single = tempered.max(-1) >= 0.9 + 1e-3
    assert single.sum() >= len(states) // 2
    host_tags = np.asarray([int(g.text) for g in gens])
    np.testing.assert_array_equal(tags[single], host_tags[single])


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_duplicates_are_computed_once_and_ended_lanes_keep_their_tag(source):
    base = random_states(5, seed=3)
    states = jnp.asarray(np.concatenate([base, base[:3], base[:2]]))
    done = jnp.asarray([False] * 8 + [True, True])
    prev = jnp.arange(10, dtype=jnp.int32) % 4
    tags, aux = jax.jit(source.apply)(source.arrays, states, prev, done, jnp.float32(5.0))
    assert int(aux["computed"]) == 5
    np.testing.assert_array_equal(np.asarray(tags)[5:8], np.asarray(tags)[:3])
    np.testing.assert_array_equal(np.asarray(tags)[8:], np.asarray(prev)[8:])
    # Nothing active: no forward pass at all, every lane keeps its tag.
    tags, aux = jax.jit(source.apply)(source.arrays, states, prev, jnp.ones(10, bool), jnp.float32(5.0))
    assert int(aux["computed"]) == 0
    np.testing.assert_array_equal(np.asarray(tags), np.asarray(prev))


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_the_answer_cache_serves_prompts_met_before(source):
    """A later period recomputes only new prompts, and a served answer is the computed one."""
    states = random_states(12, seed=4)
    states[:, 4] %= 45.0
    states[11, 4] = 900.0  # 9000 tenths: beyond the packed key, computed every time it is met
    prev, done = jnp.zeros(12, jnp.int32), jnp.zeros(12, bool)
    step = jax.jit(source.apply_cached)
    tags1, aux1, cache = step(source.arrays, source.init_cache(), jnp.asarray(states[:8]), prev[:8], done[:8], 0.0)
    assert int(aux1["computed"]) == 8
    assert int((np.asarray(cache["keys"]) != 0xFFFFFFFF).sum()) == 8
    assert np.all(np.diff(np.asarray(cache["keys"]).astype(np.int64)) >= 0)
    mixed = jnp.asarray(np.concatenate([states[4:12], states[:4]]))
    tags2, aux2, cache = step(source.arrays, cache, mixed, prev[:12], done[:12], 5.0)
    assert int(aux2["computed"]) == 4  # states 8..11 only
    assert int((np.asarray(cache["keys"]) != 0xFFFFFFFF).sum()) == 11
    _, aux3, _ = step(source.arrays, cache, mixed, prev[:12], done[:12], 10.0)
    assert int(aux3["computed"]) == 1
    np.testing.assert_array_equal(np.asarray(aux2["logits"])[[8, 9, 10, 11, 0, 1, 2, 3]], np.asarray(aux1["logits"]))
    np.testing.assert_array_equal(np.asarray(tags2)[[8, 9, 10, 11, 0, 1, 2, 3]], np.asarray(tags1))
    _, aux_plain = jax.jit(source.apply)(source.arrays, mixed, prev, done, 5.0)
    np.testing.assert_allclose(np.asarray(aux2["logits"]), np.asarray(aux_plain["logits"]), atol=1e-5)


def test_runner_threads_a_carried_tag_state():
    env, params = jaxarena.make("Arena-v0", bot="evasive")

    def count_periods(state, features, prev_tags, done, time_s, key):
        return jnp.full_like(prev_tags, state % 4), {"seen": jnp.broadcast_to(state, prev_tags.shape)}, state + 1

    source = CarryTagSource(init=lambda n: jnp.int32(0), fn=count_periods)
    run = make_runner(env, params, lambda p, o, k: jnp.zeros(5, jnp.int32), source, 2, num_periods=3)
    result = run(None, params, jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(result.decision_aux["seen"][:, 0]), [0, 1, 2])
    np.testing.assert_array_equal(np.asarray(result.decision_tags[:, 0]), [0, 1, 2])


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_runner_stacks_a_tag_sources_aux_per_period():
    env, params = jaxarena.make("Arena-v0", bot="evasive")

    def with_aux(features, prev_tags, done, time_s, key):
        return (prev_tags + 1) % 4, {"t": jnp.broadcast_to(time_s, prev_tags.shape), "f": features[:, 0]}

    run = make_runner(env, params, lambda p, o, k: jnp.zeros(5, jnp.int32), with_aux, 3, num_periods=4)
    result = run(None, params, jax.random.key(0))
    chex.assert_shape(result.decision_aux["t"], (4, 3))
    np.testing.assert_allclose(np.asarray(result.decision_aux["t"][:, 0]), [0.0, 5.0, 10.0, 15.0])
    np.testing.assert_array_equal(np.asarray(result.decision_aux["f"]), np.asarray(result.decision_features[..., 0]))
    plain = make_runner(env, params, lambda p, o, k: jnp.zeros(5, jnp.int32), 2, 3, num_periods=2)
    assert plain(None, params, jax.random.key(0)).decision_aux is None


@pytest.mark.slow
def test_a_rollout_with_the_graph_source_logs_what_the_host_path_logs(source, tmp_path):
    """The same states through the host selector give the same records (bar latency and caching)."""
    from jaxarena.llm.backends.embedded import EmbeddedBackend
    from jaxarena.llm.selector import TagSelector

    env, params = jaxarena.make("Arena-v0", bot="aggressive")

    def policy(p, obs, key):
        return jax.random.randint(key, (5,), 0, 6)

    run = make_runner(env, params, policy, source.tag_fn(), 6, num_periods=3)
    result = run(None, params, jax.random.key(3))
    records = source.records.decision_records(result, {"bot": "aggressive"})
    assert len(records) == int(np.asarray(result.decision_active).sum())
    backend = EmbeddedBackend(generator=source.generator)
    host = []
    with TagSelector(backend, cache=False) as selector:
        selector.context = {"bot": "aggressive"}
        for p in range(3):
            selector.select(
                np.asarray(result.decision_features[p]),
                np.asarray(result.decision_aux["prev_tags"][p]),
                ~np.asarray(result.decision_active[p]),
                float(result.decision_aux["time_s"][p]),
            )
        host = selector.records
    volatile = {"latency_s", "cache_hit", "probs", "tag", "reply"}
    assert [{k: v for k, v in r.items() if k not in volatile} for r in records] == [
        {k: v for k, v in r.items() if k not in volatile} for r in host
    ]
    assert [r.keys() for r in records] == [r.keys() for r in host]
    probs = np.asarray([r["probs"] for r in records])
    np.testing.assert_allclose(probs, np.asarray([r["probs"] for r in host]), atol=0.03)
    agree = np.mean([a["tag"] == b["tag"] for a, b in zip(records, host, strict=True)])
    assert agree >= 0.95


@pytest.mark.slow
def test_the_protocol_on_both_paths_writes_the_same_records(tmp_path):
    """A short protocol run per path: same record fields, the same period-0 decisions, the path reported."""
    import json

    from jaxarena.protocol import ProtocolConfig, evaluate

    def config(path):
        return ProtocolConfig(episodes=3, seed=5, bots=("evasive",), num_periods=3, n_boot=200, llm_path=path)

    cache = tmp_path / "cache.jsonl"
    graph = evaluate(config("graph"), tmp_path, "g", cache_path=cache, progress=False, figures=False)
    assert graph["llm"]["path"] == "graph" and graph["timings"]["llm_path"] == "graph"
    # The host path computes its own replies (a cache of its own) ...
    host = evaluate(config("host"), tmp_path, "h", cache_path=tmp_path / "host.jsonl", progress=False, figures=False)
    assert host["llm"]["path"] == "host" and host["llm_counters"]["llm_requests"] > 0
    # ... while the graph path reads no prompt cache but fills it: a host run on it makes no requests.
    warm = evaluate(config("host"), tmp_path, "w", cache_path=cache, progress=False, figures=False)
    assert warm["llm_counters"]["llm_requests"] == 0 and warm["llm_counters"]["cache_hits"] > 0

    def records(run):
        return [json.loads(line) for line in (tmp_path / run / "decisions.jsonl").read_text().splitlines()]

    g, h = records("g"), records("h")
    assert [r.keys() for r in g[:3]] == [r.keys() for r in h[:3]]
    same = ("call", "episode", "state", "prompt_hash", "prev_tag", "tag", "reply", "decode", "backend", "model")
    first = [r for r in g if r["call"] == 0], [r for r in h if r["call"] == 0]
    assert len(first[0]) == 3
    assert [{k: r[k] for k in same} for r in first[0]] == [{k: r[k] for k in same} for r in first[1]]
    # With a cold cache auto takes the graph path; once the cache is warm for this model, the host path.
    cold = evaluate(config("auto"), tmp_path, "c", cache_path=tmp_path / "none.jsonl", progress=False, figures=False)
    assert cold["llm"]["path"] == "graph" and "cold" in cold["llm"]["path_reason"]
    auto = evaluate(config("auto"), tmp_path, "a", cache_path=cache, progress=False, figures=False)
    assert auto["llm"]["path"] == "host" and "cache" in auto["llm"]["path_reason"]


def test_a_scenarios_hp_maxima_size_the_number_slots(source):
    """`headroom`'s bot has 1,500 HP: the line must read "1500/1500" on both paths, never clamp at 999."""
    lines = StateLineTokens(source.generator.tokenizer.encode, source.lines._host_ids, bot_max_hp=1500.0)
    states = np.asarray([[1500, 60, 5, 1, 3.0], [999.6, 41, 4, 0, 12.3], [1234.4, 0, 0, 0, 0.0]], np.float32)
    tokens, n_pad = jax.jit(lines.tokens)(jnp.asarray(states))
    for row, feats in enumerate(states):
        assert np.asarray(tokens)[row, int(n_pad[row]) :].tolist() == lines.host_suffix(feats.tolist())[1]
    assert "Enemy bot HP: 1500/1500." in build_prompt(*states[0].tolist(), bot_max_hp=1500.0).user

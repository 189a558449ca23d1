"""The embedded model's tokenizer and chat template against llama.cpp's."""

from __future__ import annotations

import pytest
from embedded_common import loaded, reference

from jaxarena.llm.prompt import SYSTEM
from jaxarena.llm.tokenizer import ChatTokenizer, chatml, chatml_prefix, is_chatml_template


@pytest.fixture(scope="module")
def tok():
    return ChatTokenizer(loaded().fields)


def test_fixture_is_big_enough():
    ref = reference()
    assert len([c for c in ref["tokens"] if c["kind"] == "chat"]) >= 100
    assert len(ref["logits"]) >= 4


def test_ids_match_llama_cpp_on_every_fixture_text(tok):
    cases = reference()["tokens"]
    mismatches = [c["text"] for c in cases if tok.encode(c["text"]) != c["ids"]]
    assert not mismatches, f"{len(mismatches)}/{len(cases)} differ, first: {mismatches[0]!r}"


def test_chat_rendering_matches_fixture_text(tok):
    for case in reference()["tokens"]:
        if case["kind"] == "chat":
            assert chatml(case["system"], case["user"]) == case["text"]


def test_prompt_module_system_text_is_the_fixtures():
    # If prompt.SYSTEM changes, regenerate the fixture (tools/make_llm_reference.py)
    # so that the logit checks keep testing the prompts the protocol really sends.
    assert reference()["logits"][0]["system"] == SYSTEM


def test_digits_and_markers_are_single_tokens(tok):
    digit_ids = [tok.encode(str(d)) for d in range(10)]
    assert all(len(ids) == 1 for ids in digit_ids)
    assert [i[0] for i in digit_ids] == reference()["logits"][0]["digit_ids"]
    assert tok.encode("<|im_start|>") == [1]
    assert tok.encode("<|im_end|>") == [2]
    assert 2 in tok.stop_ids and 0 in tok.stop_ids


def test_numbers_are_split_into_digits(tok):
    ids = tok.encode("245/300")
    assert [tok.decode([i]) for i in ids] == ["2", "4", "5", "/", "3", "0", "0"]


def test_prefix_ids_are_a_prefix_of_the_full_prompt(tok):
    user = (
        "Enemy bot HP: 245/300. Average NPC HP: 41/60. NPCs alive: 4/5. Bot moving: yes. "
        "Nearest NPC distance: 6.3 units."
    )
    pre = tok.encode(chatml_prefix(SYSTEM))
    full = tok.encode(chatml(SYSTEM, user))
    assert full[: len(pre)] == pre and len(full) > len(pre)


def test_decode_round_trips_plain_text(tok):
    for text in ["Hello, world!", "Café 🙂 2+2=4", "  spaces\tand\nnewlines "]:
        assert tok.decode(tok.encode(text)) == text


def test_gguf_template_is_chatml():
    assert is_chatml_template(loaded().fields["tokenizer.chat_template"])
    assert not is_chatml_template("{{ messages }}")
    assert not is_chatml_template(None)

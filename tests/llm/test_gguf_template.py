"""Chat templates rendered with Jinja (`chat_template.ChatTemplate`) and the prefix the cache shares."""

from __future__ import annotations

import pytest
from embedded_common import loaded
from embedded_common import reference as smollm2_reference
from gguf_common import ARCHS, generator

from jaxarena.llm.chat_template import ChatTemplate
from jaxarena.llm.prompt import SYSTEM
from jaxarena.llm.tokenizer import ChatTokenizer, chatml, chatml_prefix

USER = (
    "Enemy bot HP: 245/300. Average NPC HP: 41/60. NPCs alive: 4/5. Bot moving: yes. Nearest NPC distance: 6.3 units."
)

# Mistral-7B-Instruct-v0.3 style: the system text joins the last user turn.
WITH_SYSTEM = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- bos_token }}{%- for message in loop_messages %}{%- if message['role'] == 'user' %}"
    "{%- if loop.last and system_message is defined %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}{%- endif %}{%- endfor %}"
)
# Mistral-7B-Instruct-v0.1 style: raises on a system message.
STRICT = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] != 'user' %}"
    "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endfor %}"
)


def test_smollm2_template_renders_todays_chatml_byte_for_byte():
    tok = ChatTokenizer(loaded().fields)
    cases = [c for c in smollm2_reference()["tokens"] if c["kind"] == "chat"]
    assert len(cases) >= 100
    for case in cases:
        text = tok.render(case["system"], case["user"])
        assert text == chatml(case["system"], case["user"]) == case["text"]
    assert tok.prefix(SYSTEM) == chatml_prefix(SYSTEM)
    assert tok.template.system_role and not tok.add_bos


def test_template_with_a_system_role():
    t = ChatTemplate(WITH_SYSTEM, bos_token="<s>", eos_token="</s>")
    assert t.system_role
    assert t.render("S", "U") == "<s>[INST] S\n\nU[/INST]"
    assert t.prefix("S") == "<s>[INST] S\n\n"


@pytest.mark.parametrize(
    "source", [STRICT, "{% for m in messages %}{% if m.role == 'user' %}<{{ m.content }}>{% endif %}{% endfor %}"]
)
def test_template_without_a_system_role_gets_the_system_text_in_the_user_turn(source):
    # STRICT raises on a system message; the second template silently drops it.
    t = ChatTemplate(source, bos_token="<s>")
    assert not t.system_role
    text = t.render("Be brief.", USER)
    assert "Be brief.\n\n" + USER in text
    assert text.startswith(t.prefix("Be brief.")) and t.prefix("Be brief.").endswith("Be brief.\n\n")


def test_template_that_rewrites_the_user_text_gets_no_shared_prefix():
    t = ChatTemplate("{% for m in messages %}[{{ m.role }}]{{ m.content | upper }}{% endfor %}")
    assert t.render("sys", "hello") == "[system]SYS[user]HELLO"
    assert t.prefix("sys") == ""


def test_jinja_environment_matches_transformers_settings():
    from jinja2.exceptions import SecurityError, TemplateError

    # trim_blocks + lstrip_blocks: block tags leave no blank lines or indentation behind.
    t = ChatTemplate(
        "{% for m in messages %}\n    {% if m.role == 'user' %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}"
    )
    # This template drops the system message, so the system text opens the user turn.
    assert t.render("s", "u") == "s\n\nu\n"
    with pytest.raises(TemplateError, match="no such role"):
        ChatTemplate("{{ raise_exception('no such role') }}").render("s", "u")
    # Sandboxed and immutable: a template cannot change its inputs.
    with pytest.raises(SecurityError):
        ChatTemplate("{{ messages.append(1) }}").render("s", "u")
    with pytest.raises(ValueError, match="no tokenizer.chat_template"):
        ChatTemplate("")


@pytest.mark.parametrize("arch", ARCHS)
def test_fixture_prefix_ids_start_the_full_prompt(arch):
    gen = generator(arch)
    full = gen.tokenizer.encode(gen.tokenizer.render(SYSTEM, USER))
    pre = gen._system_ids(SYSTEM)
    assert len(pre) > 20 and full[: len(pre)] == pre
    assert gen.split_prefix(SYSTEM, full) == len(pre)

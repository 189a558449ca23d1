"""A GGUF's own `tokenizer.chat_template`, rendered with Jinja as HF transformers renders it.

The template is compiled in a sandboxed, immutable Jinja environment with
`trim_blocks` and `lstrip_blocks`, with `raise_exception` and a `tojson` filter
available, and rendered with `add_generation_prompt=True` and the file's
`bos_token` / `eos_token` strings: the same inputs `apply_chat_template` gives
a template, so the prompt text matches what the model was trained on.

The prefix cache needs the part of a prompt that does not depend on the user
text. Rather than writing it per template, `ChatTemplate.prefix` renders the
conversation with two different user strings, takes their common prefix and
checks that both renders are `prefix + user + suffix` with the same suffix. A
template that does not pass that check (one that rewrites the user text) gets
an empty prefix: still correct, only slower.

Templates without a system role (Mistral's raises on one, or drops it) get the
system text at the start of the user message, separated by a blank line, as
Mistral's own later templates do.
"""

from __future__ import annotations

import functools
import json

#: Two user strings that no template treats specially (no edge whitespace, no markers).
_PROBES = ("Xq7u1", "Zj3w9")


def _raise_exception(message: str):
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _tojson(value, indent=None, **_ignored):
    # As transformers: keep non-ASCII text readable (Jinja's own tojson escapes it for HTML).
    return json.dumps(value, ensure_ascii=False, indent=indent)


@functools.lru_cache(maxsize=16)
def compile_template(source: str):
    """A compiled Jinja template (cached per source text)."""
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:  # pragma: no cover - jinja2 is in the [llm] extra
        raise ImportError(
            "rendering a GGUF chat template needs jinja2; install it with: pip install 'jaxarena[llm]'"
        ) from exc
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    return env.from_string(source)


class ChatTemplate:
    """One model's chat template: `render(system, user)` and `prefix(system)`.

    `system_role` is False when the template has no system role, in which case
    the system text is merged into the user message (see the module docstring).
    """

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        if not source:
            raise ValueError("the GGUF has no tokenizer.chat_template; a chat model's GGUF needs one")
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token
        self._template = compile_template(source)
        self.system_role = self._supports_system()
        self._prefixes: dict[str, str] = {}

    def _render_messages(self, messages: list[dict]) -> str:
        return self._template.render(
            messages=messages,
            add_generation_prompt=True,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )

    def _supports_system(self) -> bool:
        from jinja2.exceptions import TemplateError

        try:
            a = self._render_messages([{"role": "system", "content": _PROBES[0]}, {"role": "user", "content": "u"}])
            b = self._render_messages([{"role": "system", "content": _PROBES[1]}, {"role": "user", "content": "u"}])
        except TemplateError:
            return False
        # A template that silently drops the system message renders both alike.
        return a != b

    def messages(self, system: str, user: str) -> list[dict]:
        """The conversation as the template receives it."""
        if self.system_role:
            return [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return [{"role": "user", "content": f"{system}\n\n{user}" if system else user}]

    def render(self, system: str, user: str) -> str:
        """The prompt text: one system and one user turn, with the assistant turn opened."""
        return self._render_messages(self.messages(system, user))

    def prefix(self, system: str) -> str:
        """The leading part of `render(system, user)` that is the same for every `user`."""
        hit = self._prefixes.get(system)
        if hit is None:
            hit = self._derive_prefix(system)
            if len(self._prefixes) > 64:
                self._prefixes.clear()
            self._prefixes[system] = hit
        return hit

    def _derive_prefix(self, system: str) -> str:
        u1, u2 = _PROBES
        r1, r2 = self.render(system, u1), self.render(system, u2)
        n = 0
        for a, b in zip(r1, r2, strict=False):
            if a != b:
                break
            n += 1
        pre = r1[:n]
        s1 = r1[n:]
        s2 = r2[n:]
        # Both must be prefix + user + the same suffix; otherwise the template
        # rewrites the user text and no prefix can be trusted.
        if s1.startswith(u1) and s2.startswith(u2) and s1[len(u1) :] == s2[len(u2) :]:
            return pre
        return ""

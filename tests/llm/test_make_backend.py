"""`jaxarena.llm.backends.make_backend`: building a backend by name, and its errors."""

from __future__ import annotations

import pytest

from jaxarena.llm import make_backend as exported
from jaxarena.llm.backends import BACKENDS, make_backend


def test_builds_each_backend_by_name():
    assert exported is make_backend
    assert BACKENDS == ("embedded", "ollama", "gguf")
    embedded = make_backend()  # the default; cheap: the model loads on first use
    assert embedded.name == "embedded" and embedded.model == "SmolLM2-135M-Instruct.Q4_1"
    assert make_backend("embedded", seed=3).options["seed"] == 3
    pytest.importorskip("ollama")
    ollama = make_backend("ollama", model="mistral", host="http://127.0.0.1:1")
    assert (ollama.name, ollama.model, ollama.host) == ("ollama", "mistral", "http://127.0.0.1:1")


@pytest.mark.parametrize("name", ["mistral", "Embedded", "", None])
def test_unknown_name_lists_the_supported_backends(name):
    with pytest.raises(ValueError, match=r"unknown LLM backend .*supported backends: 'embedded', 'ollama'"):
        make_backend(name)


def test_bad_argument_names_the_backend():
    with pytest.raises(TypeError, match=r"'embedded' LLM backend \(EmbeddedBackend\).*host"):
        make_backend("embedded", host="http://127.0.0.1:11434")

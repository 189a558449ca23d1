"""`make_backend("gguf", path=...)`, the Ollama store resolver, the CLI's `--llm gguf:PATH`, and the errors."""

from __future__ import annotations

import json
import shutil

import gguf
import numpy as np
import pytest
from gguf_common import gguf_path

from jaxarena.llm import ollama_store
from jaxarena.llm.backends import make_backend, parse_llm_spec
from jaxarena.llm.prompt import build_prompt

PROMPTS = [build_prompt(245, 41, 4, 1, 6.3), build_prompt(12, 59, 5, 0, 0.7)]


def _ollama_store(root, name="tiny", tag="latest", arch="qwen2"):
    """Lay out an Ollama store with the fixture GGUF as the model blob."""
    hexdigest = "ab" * 32
    blobs = root / "blobs"
    blobs.mkdir(parents=True)
    shutil.copyfile(gguf_path(arch), blobs / f"sha256-{hexdigest}")
    (blobs / f"sha256-{'cd' * 32}").write_text("{}")  # a config layer, not the model
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.params", "digest": f"sha256:{'cd' * 32}"},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{hexdigest}"},
    ]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return blobs / f"sha256-{hexdigest}"


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_gguf_backend_runs_choice_and_free_decoding(arch):
    choice = make_backend("gguf", path=str(gguf_path(arch)), max_batch=4)
    assert (choice.name, choice.model, choice.decode) == ("gguf", f"tiny_{arch}.gguf", "choice")
    replies = choice.generate_sync(PROMPTS)
    for r in replies:
        assert r.error is None and r.text in {"0", "1", "2", "3"}
        assert len(r.probs) == 4 and abs(sum(r.probs) - 1) < 1e-6
    free = make_backend("gguf", path=gguf_path(arch), decode="free", max_batch=4, temperature=0.0)
    for r in free.generate_sync(PROMPTS):
        assert r.error is None and r.probs is None and isinstance(r.text, str)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_ollama_store_resolves_a_model_and_the_backend_runs_it(tmp_path, monkeypatch):
    blob = _ollama_store(tmp_path / "models")
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "models"))
    assert ollama_store.store_dir() == tmp_path / "models"
    assert ollama_store.resolve("tiny") == ollama_store.resolve("ollama:tiny:latest") == blob
    assert ollama_store.installed() == ["tiny:latest"]
    backend = make_backend("gguf", path="ollama:tiny")
    assert backend.gguf_path == blob and backend.model == "ollama:tiny:latest@abababababab"
    direct = make_backend("gguf", path=str(gguf_path("qwen2")))
    a, b = backend.generate_sync(PROMPTS[:1])[0], direct.generate_sync(PROMPTS[:1])[0]
    assert a.error is None and np.allclose(a.probs, b.probs)


def test_ollama_store_defaults_to_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ollama_store.store_dir() == tmp_path / ".ollama" / "models"
    assert ollama_store.parse_name("user/model:7b") == ("user/model", "7b")
    assert ollama_store.parse_name("mistral") == ("library/mistral", "latest")


def test_model_missing_from_the_ollama_store_names_the_installed_ones(tmp_path, monkeypatch):
    _ollama_store(tmp_path / "models", name="qwen2", tag="0.5b")
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "models"))
    with pytest.raises(FileNotFoundError, match=r"mistral:latest not found .*Installed: qwen2:0.5b"):
        make_backend("gguf", path="ollama:mistral")
    with pytest.raises(FileNotFoundError, match="not found"):
        make_backend("gguf", path="ollama:qwen2")  # tag defaults to latest, which is not there


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"GGUF file not found: .*nope.gguf.*ollama:NAME\[:TAG\]"):
        make_backend("gguf", path=str(tmp_path / "nope.gguf"))
    with pytest.raises(TypeError, match="needs path="):
        make_backend("gguf")
    (tmp_path / "text.gguf").write_text("hello")
    with pytest.raises(ValueError, match="not a GGUF file"):
        make_backend("gguf", path=str(tmp_path / "text.gguf"))


def _write_gguf(path, arch="llama", qtype=gguf.GGMLQuantizationType.F32):
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in {
        "block_count": 1,
        "context_length": 32,
        "embedding_length": 32,
        "feed_forward_length": 32,
        "attention.head_count": 2,
        "attention.head_count_kv": 1,
    }.items():
        w.add_uint32(f"{arch}.{key}", value)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(["a", "b"])
    w.add_token_types([1, 1])
    w.add_chat_template("{{ messages[0].content }}")
    data = np.zeros((32, 32), np.float32)
    if qtype != gguf.GGMLQuantizationType.F32:
        data = gguf.quants.quantize(data, qtype)
    w.add_tensor("blk.0.attn_q.weight", data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_unsupported_architecture_names_the_supported_ones(tmp_path):
    _write_gguf(tmp_path / "g.gguf", arch="gemma")
    with pytest.raises(ValueError, match=r"unsupported GGUF architecture 'gemma'; supported: llama, qwen2"):
        make_backend("gguf", path=str(tmp_path / "g.gguf"))


def test_unsupported_tensor_type_names_the_supported_ones(tmp_path):
    _write_gguf(tmp_path / "q.gguf", qtype=gguf.GGMLQuantizationType.Q5_1)
    with pytest.raises(ValueError, match=r"unsupported GGUF tensor type\(s\) Q5_1 .*supported: F32, F16, BF16, Q8_0"):
        make_backend("gguf", path=str(tmp_path / "q.gguf"))
    from jaxarena.llm.weights import load_model

    with pytest.raises(ValueError, match="Q5_1"):
        load_model(tmp_path / "q.gguf", use_cache=False)


def test_llm_specs_for_the_command_line(tmp_path):
    from jaxarena.protocol.cli import build_parser, config_from_args, default_run_id
    from jaxarena.protocol.config import ProtocolConfig

    assert parse_llm_spec("embedded") == ("embedded", {})
    assert parse_llm_spec("gguf:ollama:mistral:7b") == ("gguf", {"path": "ollama:mistral:7b"})
    for bad in ("gguf", "gguf:", "mistral", "ollama:mistral"):
        with pytest.raises(ValueError, match="choose from embedded, ollama, gguf:PATH"):
            parse_llm_spec(bad)
    with pytest.raises(ValueError, match="gguf:PATH"):
        ProtocolConfig(llm="gguf")
    path = str(gguf_path("llama"))
    config = config_from_args(build_parser().parse_args(["--llm", f"gguf:{path}"]))
    assert config.llm == f"gguf:{path}"
    assert default_run_id(config).startswith("gguf-tiny_llama-n100-seed0-")
    assert default_run_id(ProtocolConfig(llm="gguf:ollama:mistral:7b")).startswith("gguf-mistral_7b-")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--llm", "gguf"])


def test_runner_builds_the_gguf_backend(tmp_path):
    from jaxarena.protocol.combinations.b import llm_run
    from jaxarena.protocol.config import ProtocolConfig
    from jaxarena.protocol.runner import ProtocolRunner

    config = ProtocolConfig(llm=f"gguf:{gguf_path('qwen2')}", decode="free", episodes=1)
    runner = ProtocolRunner(config, tmp_path, cache_path=None, progress=False)
    try:
        backend = llm_run(runner.context).backend()
        assert (backend.name, backend.decode, backend.model) == ("gguf", "free", "tiny_qwen2.gguf")
        assert llm_run(runner.context).identity()["backend"] == "gguf"
    finally:
        runner.close()

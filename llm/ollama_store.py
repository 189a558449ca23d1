"""Find the GGUF of a model pulled with Ollama in Ollama's local store, without a server.

`ollama pull mistral` leaves a JSON manifest at
`<store>/manifests/registry.ollama.ai/library/mistral/latest` whose layer of
media type `application/vnd.ollama.image.model` names the weights blob by
digest (`sha256:<hex>`); the blob is the GGUF file `<store>/blobs/sha256-<hex>`.
The store is `$OLLAMA_MODELS`, else `~/.ollama/models`. Names with a namespace
("user/model") live under `registry.ollama.ai/<user>/<model>`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PREFIX = "ollama:"
REGISTRY = "registry.ollama.ai"
MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"


def store_dir() -> Path:
    """Ollama's model store: `$OLLAMA_MODELS`, else `~/.ollama/models`."""
    root = os.environ.get("OLLAMA_MODELS")
    return Path(root).expanduser() if root else Path.home() / ".ollama" / "models"


def parse_name(spec: str) -> tuple[str, str]:
    """ "mistral" → ("library/mistral", "latest"); "user/model:7b" → ("user/model", "7b")."""
    spec = spec.removeprefix(PREFIX).strip()
    name, _, tag = spec.partition(":")
    if not name or "/" in tag:
        raise ValueError(f"bad Ollama model name {spec!r}; expected NAME or NAME:TAG (e.g. mistral, qwen2:0.5b)")
    if "/" not in name:
        name = f"library/{name}"
    return name, tag or "latest"


def installed(store: Path | None = None) -> list[str]:
    """Models in the store, as "name:tag" ("library/" left out), sorted."""
    root = (store or store_dir()) / "manifests" / REGISTRY
    if not root.is_dir():
        return []
    out = []
    for manifest in root.glob("*/*/*"):
        if manifest.is_file():
            ns, name, tag = manifest.parts[-3:]
            out.append(f"{name}:{tag}" if ns == "library" else f"{ns}/{name}:{tag}")
    return sorted(out)


def resolve(spec: str, store: Path | None = None) -> Path:
    """The GGUF blob of Ollama model `spec` ("mistral", "mistral:7b", "ollama:qwen2:0.5b").

    Raises FileNotFoundError naming the store and the models it has when the
    model, its manifest's model layer, or the blob is missing.
    """
    store = store or store_dir()
    name, tag = parse_name(spec)
    manifest = store / "manifests" / REGISTRY / name / tag
    have = installed(store)
    listing = ", ".join(have) if have else "none"
    if not manifest.is_file():
        raise FileNotFoundError(
            f"Ollama model {name.removeprefix('library/')}:{tag} not found in the store {store} "
            f"(set $OLLAMA_MODELS for another store; `ollama pull` adds models). Installed: {listing}"
        )
    try:
        layers = json.loads(manifest.read_text())["layers"]
        digest = next(layer["digest"] for layer in layers if layer.get("mediaType") == MODEL_MEDIA_TYPE)
    except (ValueError, KeyError, TypeError, StopIteration) as exc:
        raise FileNotFoundError(
            f"Ollama manifest {manifest} has no {MODEL_MEDIA_TYPE} layer; it is not a model this backend can run"
        ) from exc
    algo, _, hexdigest = str(digest).partition(":")
    blob = store / "blobs" / f"{algo}-{hexdigest}"
    if not blob.is_file():
        raise FileNotFoundError(f"Ollama blob {blob} (model layer of {manifest}) is missing; re-pull the model")
    return blob

"""Shipped LoRA adapters for the tag model, by name: `llm/adapters/<name>/` holds `adapter.npz` and `card.json`.

    jaxarena-evaluate --llm embedded --adapter NAME        # a shipped adapter
    jaxarena-evaluate --llm embedded --adapter runs/x/adapter   # any adapter directory

`resolve_adapter` turns a name or a directory into the directory; the card's
checksum names the adapter in the model's identity (cache keys, fingerprints).
The arrays are checked against the model when it loads (`lora.load_adapter`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..lora import CARD_FILE, AdapterError

ADAPTERS_DIR = Path(__file__).resolve().parent


def shipped_adapters() -> list[str]:
    """Names of the adapters that ship with the package."""
    return sorted(p.parent.name for p in ADAPTERS_DIR.glob(f"*/{CARD_FILE}"))


#: What each kind of adapter is for, as the error for the wrong one says.
KINDS = {
    "llm-adapter": "the tag model's choice (jaxarena-tune-llm; --adapter, --tuned-adapter)",
    "coder-adapter": "the coder's programs (jaxarena-tune-coder; jaxarena-coder --coder-adapter)",
    "glance-adapter": "the LLM's answers to the glance prompt every 0.2 s (jaxarena-tune-llm glance)",
    "glance-table": "a table of answers to the glance prompt trained without the LLM (--learner table)",
}


def resolve_adapter(spec: str, kind: str | tuple[str, ...] | None = None) -> Path:
    """The directory of adapter `spec`: an existing directory, else a shipped name; AdapterError if neither.

    `kind` (one of `KINDS`, or several that all serve): refuse an adapter trained for another job.
    """
    path = Path(spec).expanduser()
    if path.is_dir():
        found = path.resolve()
    elif "/" not in str(spec) and (ADAPTERS_DIR / str(spec) / CARD_FILE).is_file():
        found = ADAPTERS_DIR / str(spec)
    else:
        names = ", ".join(shipped_adapters()) or "none"
        raise AdapterError(f"adapter {spec!r} not found: not a directory, nor a shipped adapter (shipped: {names})")
    if kind is not None:
        got = adapter_kind(found)
        wanted = (kind,) if isinstance(kind, str) else tuple(kind)
        if got in KINDS and got not in wanted:
            raise AdapterError(f"adapter {spec!r} is for {KINDS[got]}, not for {KINDS[wanted[0]]}")
    return found


def adapter_kind(directory: str | Path) -> str | None:
    """The kind (`KINDS`) an adapter's card names; None for a card without one, missing or corrupt
    (those are `lora.load_adapter`'s to report)."""
    try:
        return json.loads((Path(directory) / CARD_FILE).read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        return None


def adapter_checksum_of(directory: str | Path) -> str:
    """The checksum an adapter's card records (the arrays are checked against it on load)."""
    card = Path(directory) / CARD_FILE
    try:
        checksum = json.loads(card.read_text())["checksum"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AdapterError(f"{directory}: unreadable adapter card ({type(exc).__name__}: {exc})") from None
    if not isinstance(checksum, str) or len(checksum) != 64:
        raise AdapterError(f"{directory}: the adapter card has no valid checksum")
    return checksum

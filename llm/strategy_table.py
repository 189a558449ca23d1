"""The LLM's deductions and candidate tags, precomputed for every quantised state (Combination C).

The embedded SmolLM2 answers ~40 choice-decoded prompts/s on this CPU, while
PPO on the decision MDP needs millions of decisions, so the LLM cannot run in
the training graph. The fallback used here is a table keyed
by quantised state. Every deduction cell (`deduction.NUM_DEDUCTION_CELLS`)
and candidate cell (`candidates.NUM_CANDIDATE_CELLS`) is put to the LLM once;
the jitted loop then reads the answers with `deduce` and `propose`.

    table = load_table("smollm2-135m")                  # the shipped table
    probs = deduce(table, history)                      # (4,) over OPPONENT_CLASSES
    tags, p = propose(table, features, jnp.argmax(probs), params, "iterative")

Build one for any choice-decoding backend:

    python -m jaxarena.llm.strategy_table --llm embedded --out llm/tables/smollm2-135m
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxarena.names import NUM_TAGS
from jaxarena.types import EnvParams

from .candidates import CANDIDATE_STYLES, N_CANDIDATES, NUM_CANDIDATE_CELLS, candidate_cell
from .deduction import NUM_DEDUCTION_CELLS, deduction_cell
from .history import NUM_OPPONENT_CLASSES, DecisionHistory
from .table_asking import (
    Asker,
    backend_metadata,
    deduction_probs_for,
    iterative_chains_for,
    prompts_sha256,
    vanilla_probs_for,
)
from .types import Backend

# The public names (its building parts live in `table_asking`).
__all__ = [
    "ARRAY_FIELDS",
    "FORMAT_VERSION",
    "TABLES_DIR",
    "StrategyTable",
    "TableMetadata",
    "assess",
    "build_table",
    "check_style",
    "deduce",
    "load_table",
    "main",
    "propose",
    "save_table",
    "shipped_tables",
    "summary",
]

#: Where the shipped tables live; `load_table(name)` finds `<name>.npz` here.
TABLES_DIR = Path(__file__).resolve().parent / "tables"
FORMAT_VERSION = 1
ARRAY_FIELDS = ("deduction_probs", "vanilla_probs", "iterative_tags", "iterative_probs", "iterative_repeats")


@dataclasses.dataclass(frozen=True)
class TableMetadata:
    """Where a table came from. Hashable, so the table can be a jit argument.

    `options` holds the backend's sampling options as sorted (name, value)
    pairs. `no_probs` and `errors` count, per part (deduction, vanilla,
    iterative), replies that had no probabilities: a choice without them
    (Ollama) is recorded one-hot on the chosen digit, a failed or unusable
    reply as uniform.
    """

    backend: str = ""
    model: str = ""
    decode: str = "choice"
    options: tuple[tuple[str, float], ...] = ()
    prompts_sha256: str = ""
    built_at: str = ""
    build_seconds: float = 0.0
    no_probs: tuple[tuple[str, int], ...] = ()
    errors: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(options=dict(self.options), no_probs=dict(self.no_probs), errors=dict(self.errors))
        return d

    @classmethod
    def from_json(cls, d: dict) -> TableMetadata:
        names = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in names}
        for key in ("options", "no_probs", "errors"):
            d[key] = tuple(sorted(d.get(key, {}).items()))
        return cls(**d)


@struct.dataclass
class StrategyTable:
    """The LLM's answers per cell. Rows are cells; probabilities are over `TAG_OPTIONS` digits.

    deduction_probs (NUM_DEDUCTION_CELLS, 4) f32: over `OPPONENT_CLASSES`.
    vanilla_probs (NUM_CANDIDATE_CELLS, 4) f32: over the tags, for the plain candidate prompt.
    iterative_tags (NUM_CANDIDATE_CELLS, 3) i32: the chain's distinct proposals, in order.
    iterative_probs (NUM_CANDIDATE_CELLS, 3) f32: each proposal's probability in its own reply.
    iterative_repeats (NUM_CANDIDATE_CELLS,) i32: replies whose top option repeated an earlier one.
    """

    deduction_probs: jax.Array
    vanilla_probs: jax.Array
    iterative_tags: jax.Array
    iterative_probs: jax.Array
    iterative_repeats: jax.Array
    metadata: TableMetadata = struct.field(pytree_node=False, default=TableMetadata())


# ------------------------------------------------------------------ lookups (pure JAX)


def deduce(table: StrategyTable, history: DecisionHistory) -> jax.Array:
    """(4,) f32: the LLM's probabilities over `OPPONENT_CLASSES` for one arena's history."""
    return jnp.asarray(table.deduction_probs)[deduction_cell(history)]


def assess(table: StrategyTable, history: DecisionHistory) -> jax.Array:
    """() int32: the most probable opponent class (the candidate prompt's assessment)."""
    return jnp.argmax(deduce(table, history)).astype(jnp.int32)


def check_style(style: str) -> str:
    if style not in CANDIDATE_STYLES:
        raise ValueError(f"unknown candidate style {style!r}; choose from {', '.join(CANDIDATE_STYLES)}")
    return style


def propose(
    table: StrategyTable, features: jax.Array, assessment: jax.Array, params: EnvParams, style: str
) -> tuple[jax.Array, jax.Array]:
    """The LLM's N = 3 candidate tags (3,) i32 and their probabilities (3,) f32, for one arena.

    `features` is the Table 10 state (`llm_features`), `assessment` an
    `OPPONENT_CLASSES` index or `candidates.NO_ASSESSMENT`, `style` (static)
    "vanilla" (the top 3 of one reply, ties to the lower tag) or "iterative".
    Candidates are in rank order.
    """
    check_style(style)
    cell = candidate_cell(features, assessment, params)
    if style == "iterative":
        return jnp.asarray(table.iterative_tags)[cell], jnp.asarray(table.iterative_probs)[cell]
    probs = jnp.asarray(table.vanilla_probs)[cell]
    order = jnp.argsort(-probs, stable=True)[:N_CANDIDATES].astype(jnp.int32)
    return order, probs[order]


def build_table(backend: Backend, *, progress: bool = True) -> StrategyTable:
    """Puts every cell to `backend` (a choice-decoding `types.Backend`) and returns the table.

    Asks NUM_DEDUCTION_CELLS deduction prompts, NUM_CANDIDATE_CELLS candidate
    prompts and 2 x NUM_CANDIDATE_CELLS iterative follow-ups. A reply without
    probabilities never stops the build; it is counted in the metadata.
    """
    if getattr(backend, "decode", "choice") != "choice":
        raise ValueError(f"a strategy table needs choice decoding; backend decodes {backend.decode!r}")
    t0 = time.perf_counter()
    total = NUM_DEDUCTION_CELLS + N_CANDIDATES * NUM_CANDIDATE_CELLS
    asker = Asker(backend, total, progress)
    try:
        deduction = deduction_probs_for(asker, range(NUM_DEDUCTION_CELLS))
        cells = range(NUM_CANDIDATE_CELLS)
        vanilla = vanilla_probs_for(asker, cells)
        tags, probs, repeats = iterative_chains_for(asker, cells, vanilla)
    finally:
        asker.close()
    meta = TableMetadata(
        **backend_metadata(backend),
        prompts_sha256=asker.hash.hexdigest(),
        built_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        build_seconds=round(time.perf_counter() - t0, 1),
        no_probs=tuple(sorted(asker.no_probs.items())),
        errors=tuple(sorted(asker.errors.items())),
    )
    return StrategyTable(
        deduction_probs=deduction.astype(np.float32),
        vanilla_probs=vanilla.astype(np.float32),
        iterative_tags=tags,
        iterative_probs=probs,
        iterative_repeats=repeats,
        metadata=meta,
    )


# ------------------------------------------------------------------ files

_SHAPES = {
    "deduction_probs": ((NUM_DEDUCTION_CELLS, NUM_OPPONENT_CLASSES), np.float32),
    "vanilla_probs": ((NUM_CANDIDATE_CELLS, NUM_TAGS), np.float32),
    "iterative_tags": ((NUM_CANDIDATE_CELLS, N_CANDIDATES), np.int32),
    "iterative_probs": ((NUM_CANDIDATE_CELLS, N_CANDIDATES), np.float32),
    "iterative_repeats": ((NUM_CANDIDATE_CELLS,), np.int32),
}


def _paths(path: str | os.PathLike) -> tuple[Path, Path]:
    base = Path(path)
    if base.suffix in (".npz", ".json"):
        base = base.with_suffix("")
    return base.with_name(base.name + ".npz"), base.with_name(base.name + ".json")


def _atomic_write(path: Path, write) -> None:
    """Writes through a temporary file in the same folder and renames it, so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a shipped table is read by everyone
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_table(table: StrategyTable, path: str | os.PathLike) -> tuple[Path, Path]:
    """Writes `PATH.npz` (the arrays) and `PATH.json` (the metadata); returns both paths."""
    npz, meta = _paths(path)
    arrays = {name: np.asarray(getattr(table, name)) for name in ARRAY_FIELDS}
    _atomic_write(npz, lambda f: np.savez_compressed(f, **arrays))
    doc = {"format": FORMAT_VERSION, **table.metadata.to_json()}
    _atomic_write(meta, lambda f: f.write((json.dumps(doc, indent=2) + "\n").encode()))
    return npz, meta


def shipped_tables() -> list[str]:
    """The names `load_table` finds in the package (`llm/tables/<name>.npz`)."""
    return sorted(p.stem for p in TABLES_DIR.glob("*.npz"))


def load_table(path_or_name: str | os.PathLike, *, check_prompts: bool = True) -> StrategyTable:
    """A table by shipped name ("smollm2-135m") or path (with or without `.npz`).

    With `check_prompts`, raises ValueError if today's prompt code would ask
    other prompts than the ones the table was built from (rebuild it then).
    """
    name = str(path_or_name)
    npz, meta = _paths(TABLES_DIR / name if name in shipped_tables() else Path(name))
    if not npz.is_file():
        raise FileNotFoundError(
            f"no strategy table {name!r} (looked for {npz}); shipped tables: {', '.join(shipped_tables()) or 'none'}"
        )
    with np.load(npz) as data:
        arrays = {}
        for field, (shape, dtype) in _SHAPES.items():
            if field not in data or data[field].shape != shape:
                got = data[field].shape if field in data else "missing"
                raise ValueError(f"{npz}: {field} should have shape {shape}, got {got}")
            arrays[field] = data[field].astype(dtype)
    doc = json.loads(meta.read_text()) if meta.is_file() else {}
    table = StrategyTable(**arrays, metadata=TableMetadata.from_json(doc))
    built_from = table.metadata.prompts_sha256
    if check_prompts and built_from and prompts_sha256(table.iterative_tags) != built_from:
        raise ValueError(
            f"{npz} was built from other prompts than today's deduction/candidate prompts; rebuild it with "
            "python -m jaxarena.llm.strategy_table"
        )
    return table


def summary(table: StrategyTable) -> dict:
    """A few numbers that show what the model answered (argmax shares and repeat counts)."""
    ded = np.asarray(table.deduction_probs)
    van = np.asarray(table.vanilla_probs)
    return {
        "deduction_argmax_share": np.bincount(ded.argmax(1), minlength=NUM_OPPONENT_CLASSES) / len(ded),
        "deduction_mean_probs": ded.mean(0),
        "vanilla_argmax_share": np.bincount(van.argmax(1), minlength=NUM_TAGS) / len(van),
        "vanilla_mean_probs": van.mean(0),
        "iterative_first_share": np.bincount(np.asarray(table.iterative_tags)[:, 0], minlength=NUM_TAGS) / len(van),
        "iterative_repeats": np.bincount(np.asarray(table.iterative_repeats), minlength=N_CANDIDATES) / len(van),
    }


def main(argv: Sequence[str] | None = None) -> None:
    from .backends import LLM_SPECS, make_backend, parse_llm_spec

    p = argparse.ArgumentParser(description="Build the LLM strategy table (Combination C's deductions and candidates).")
    p.add_argument("--llm", default="embedded", help=f"the backend: {LLM_SPECS}")
    p.add_argument("--out", required=True, help="output path; writes PATH.npz and PATH.json")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    name, kwargs = parse_llm_spec(args.llm)
    backend = make_backend(name, decode="choice", **kwargs)
    table = build_table(backend, progress=not args.no_progress)
    npz, meta = save_table(table, args.out)
    info = {k: np.round(v, 3).tolist() for k, v in summary(table).items()}
    print(json.dumps({"npz": str(npz), "json": str(meta), **table.metadata.to_json(), **info}))


if __name__ == "__main__":
    main()

"""Writing files atomically, for every layer (checkpoint configs, protocol cells and reports).

Plain Python, no JAX: it sits in the environment package so that
`jaxarena.algorithms` and `jaxarena.protocol` can both use it without one
depending on the other.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write a file so that readers see either the old or the new contents, never a torn one.

    The data goes to a hidden temp file beside `path` (`.<name>.<pid>.tmp`),
    is flushed to disk, then renamed over `path`. Text is written as UTF-8;
    missing parent directories are created. Returns `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(tmp, mode, **({} if isinstance(data, bytes) else {"encoding": "utf-8"})) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path

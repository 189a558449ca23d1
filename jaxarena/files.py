"""Writing files atomically, for every layer (checkpoint configs, protocol cells and reports).

Plain Python, no JAX: it sits in the environment package so that
`jaxarena.algorithms` and `jaxarena.protocol` can both use it without one
depending on the other.
"""

from __future__ import annotations

import os
from pathlib import Path

from .cli_errors import UserError


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


def check_folder(path: str | os.PathLike, option: str = "--out") -> Path:
    """`path` as a folder a command may create or write into; a `UserError` naming `option` if a file is in the way.

    A command calls it before it runs anything, so `--out notes.txt` (or `--out notes.txt/run`) is one line that
    names the file, not an errno after the work is done. Returns `path` as a Path.
    """
    path = Path(path)
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                raise UserError(
                    f"{option} {path}: {folder} is a file, not a folder; name a new folder or an existing one"
                )
            break
    return path

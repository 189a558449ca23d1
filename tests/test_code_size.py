"""The team's size rule: no library file over 400 lines, no function over 100 lines.

Small modules with one clear job read and review better; this test names every
file and function that outgrows the rule, so a split happens when it is due.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The folders of the `jaxarena` package (pyproject.toml's package-dir), and the studies run on it, held to the
#: same rule though not installed.
LIBRARY = ("jaxarena", "algorithms", "llm", "protocol", "coder", "selector", "studies")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 100
#: Functions allowed over the limit, as "path::name".
LONG_FUNCTIONS: set[str] = set()


def library_files() -> list[Path]:
    return sorted(p for folder in LIBRARY for p in (ROOT / folder).rglob("*.py"))


def oversized(path: Path, root: Path = ROOT) -> list[str]:
    """What in `path` breaks the rule: the file's length, and each function's (nested ones too)."""
    source = path.read_text(encoding="utf-8")
    name = path.relative_to(root).as_posix()
    found = []
    lines = len(source.splitlines())
    if lines > MAX_FILE_LINES:
        found.append(f"{name}: {lines} lines (max {MAX_FILE_LINES})")
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES and f"{name}::{node.name}" not in LONG_FUNCTIONS:
                found.append(f"{name}::{node.name} (line {node.lineno}): {length} lines (max {MAX_FUNCTION_LINES})")
    return found


def test_the_library_folders_hold_python_files():
    files = library_files()
    for folder in LIBRARY:
        assert any(p.parent.relative_to(ROOT).parts[0] == folder for p in files), folder


def test_no_library_file_or_function_is_over_the_limit():
    found = [line for path in library_files() for line in oversized(path)]
    assert not found, "split these into smaller modules or functions:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("extra_lines", "body_lines", "expected"),
    [(0, 99, []), (0, 100, ["::too_long (line 1): 101 lines"]), (400, 1, ["lines (max 400)"])],
)
def test_the_check_names_what_is_too_long(tmp_path, extra_lines, body_lines, expected):
    path = tmp_path / "coder" / "example.py"
    path.parent.mkdir()
    body = "".join("    x = 1\n" for _ in range(body_lines))
    path.write_text("def too_long():\n" + body + "\n" * extra_lines)
    found = oversized(path, tmp_path)
    assert len(found) == len(expected)
    for line, words in zip(found, expected, strict=True):
        assert line.startswith("coder/example.py") and words in line, line


def test_the_exemptions_name_functions_that_exist():
    for entry in LONG_FUNCTIONS:
        name, _, function = entry.partition("::")
        tree = ast.parse((ROOT / name).read_text(encoding="utf-8"))
        assert any(
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function for n in ast.walk(tree)
        ), entry

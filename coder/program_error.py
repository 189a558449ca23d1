"""Why a program of the squad-policy language was refused: `ProgramError`, with a kind, a line and a reason.

The sandbox (`sandbox.check_program`), the translator and the compiler
(`compile.compile_program`) all raise it; the critic reads its message.
"""

from __future__ import annotations

KINDS = ("syntax", "forbidden", "limit", "name", "type", "shape", "timeout", "memory", "runtime")


class ProgramError(Exception):
    """Why a program was refused: kind (one of KINDS), message, and the 1-based line and its text where known."""

    def __init__(self, kind: str, message: str, line: int | None = None, source_line: str | None = None):
        if kind not in KINDS:
            raise ValueError(f"unknown ProgramError kind {kind!r}; kinds: {', '.join(KINDS)}")
        self.kind = kind
        self.message = message
        self.line = line
        self.source_line = source_line
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.kind}: {self.message}"
        text = f"line {self.line}: {self.kind}: {self.message}"
        return text + (f"\n    {self.source_line}" if self.source_line else "")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "line": self.line, "source_line": self.source_line}

    @classmethod
    def from_dict(cls, d: dict) -> ProgramError:
        return cls(d["kind"], d["message"], d.get("line"), d.get("source_line"))


def error_at(kind: str, message: str, source: str, line: int | None) -> ProgramError:
    """A ProgramError for `line` of `source`, with that line's text."""
    lines = source.splitlines()
    text = lines[line - 1].strip() if line is not None and 0 < line <= len(lines) else None
    if text is not None and len(text) > 160:  # a 2,000-deep expression is quoted, not reprinted
        text = text[:157] + "..."
    return ProgramError(kind, message, line, text)

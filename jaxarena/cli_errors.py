"""One-line errors for the console scripts: `PROG: error: MESSAGE` on stderr and exit status 2.

A user's mistake (a missing file, an unknown name, a bad value, an LLM server
that is not running) deserves one line that says what to fix, not a
traceback. Every console script builds its parser with `ArgumentParser`
(argparse's, whose errors are one line and which accepts `--debug`) and
wraps its `main` in `cli_main(prog)`:

    @cli_main("jaxarena-evaluate")
    def main(argv=None) -> int: ...

`cli_main` turns the exceptions in `USER_ERRORS` into that line; with
`--debug` anywhere on the command line they propagate with their traceback.
Any other exception (a TypeError, an AssertionError: a bug) is left alone, so
bugs keep their tracebacks.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence

#: The exit status of a usage error, as argparse's.
USAGE_EXIT = 2
#: The exit status after Ctrl-C, as a shell reports a process ended by SIGINT (128 + 2).
INTERRUPTED_EXIT = 130
#: What a command that checkpoints as it goes says after Ctrl-C.
RESUME_HINT = "run the same command again to resume"
DEBUG_FLAG = "--debug"


class UserError(Exception):
    """An error the user can fix; its message says how. Subclassed by the project's own such errors."""


#: What a console script reports as one line. ValueError covers the project's checks of names and values
#: (and its subclasses, e.g. `llm.lora.AdapterError`); OSError covers missing or unreadable files;
#: ImportError a layer installed without its extra (`jaxarena.extras.require` names the extra).
USER_ERRORS: tuple[type[BaseException], ...] = (UserError, ValueError, OSError, ImportError)


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (a multi-line message is joined with spaces)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def interrupted(prog: str, hint: str = "") -> int:
    """For a `KeyboardInterrupt` handler: `PROG: interrupted[; HINT]` on stderr, no traceback; returns 130.

    A long command stopped by Ctrl-C is not an error; when it checkpoints as it
    goes, `hint` says how to go on (usually `RESUME_HINT`).
    """
    print(f"{prog}: interrupted" + (f"; {hint}" if hint else ""), file=sys.stderr)
    return INTERRUPTED_EXIT


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with a `--debug` option and errors on one line (`PROG: error: MESSAGE (see PROG -h)`).

    Sub-command parsers made by `add_subparsers` are of this class too.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_argument(DEBUG_FLAG, action="store_true", help="show the full traceback on an error")

    def error(self, message: str):
        self.exit(USAGE_EXIT, f"{self.prog}: error: {one_line(message)} (see {self.prog} -h)\n")


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse `type`: an int >= `low`. argparse names the option: `argument --chunk: must be >= 1, got 0`."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = "int"  # a word is "invalid int value: 'x'", as with type=int
    return parse


def step_count(text: str) -> int:
    """An argparse `type`: a whole number of steps >= 1, in an int or a float spelling (`2e7`)."""
    value = float(text)
    if not 1 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a whole number of env steps >= 1, e.g. 2e7, got {text}")
    return int(value)


def cli_main(prog: str) -> Callable[[Callable[..., int | None]], Callable[..., int | None]]:
    """Decorates a console script's `main(argv=None)`: a user error is one stderr line and exit status 2."""

    def decorate(main: Callable[..., int | None]) -> Callable[..., int | None]:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int | None:
            words = sys.argv[1:] if argv is None else list(argv)
            try:
                return main(argv)
            except USER_ERRORS as exc:
                if DEBUG_FLAG in words:
                    raise
                print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
                return USAGE_EXIT

        return run

    return decorate

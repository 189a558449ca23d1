"""The squad and arena arguments that `jaxarena-tune-llm` and the studies share (no JAX import, so
building a parser stays fast)."""

from __future__ import annotations

from jaxarena.names import BOT_TYPES


def squad_args(p) -> None:
    """The squad and its arena, as every command and study takes them."""
    p.add_argument("--scenario", default="raid", help="the arena's scenario (default %(default)s)")
    p.add_argument(
        "--policy",
        default="B-obey-raid",
        help="the squad: a shipped policy's name or a run directory (default %(default)s)",
    )
    p.add_argument(
        "--bots", nargs="+", default=list(BOT_TYPES), choices=BOT_TYPES, help="the bots to play (default: all three)"
    )

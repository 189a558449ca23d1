"""Keep freed host memory in the process, so XLA:CPU's large buffers do not page-fault on every call.

glibc's malloc serves each allocation above its mmap threshold (128 KB,
rising to at most 32 MB) with a fresh `mmap`, and gives the pages back to
the kernel on `free`. XLA:CPU allocates a program's large buffers on every
call, so each call of a program with big intermediates (attention scores
over a long prompt) faults all their pages in again. Measured on a 2-core
CPU: writing a 58 MB float32 array took 23 ms that way and 3-4 ms with the
memory kept; the coder's LoRA training step went from 5.2 s to 3.2-3.8 s
(one reply), and from 12.0 s to 6.9 s for a batch of two (with one arena).

- `import jaxarena` raises glibc's mmap and trim thresholds (`mallopt`), so
  large blocks come from the heap and stay there for the next call. The
  resident memory then stays near its peak instead of shrinking after each
  call. Set ``JAXARENA_SYSTEM_MALLOC=1`` to leave the allocator alone.
- `keep_freed_memory(one_arena=True)` also gives every thread one arena. A
  thread's own arena grows in 64 MB heaps and maps any larger block afresh
  whatever the threshold, so a program with blocks over 64 MB (the coder's
  batch of two) needs it. `jaxarena-tune-coder train` sets it. It is not
  the default because one arena slowed PPO training by 20-50% here (its
  threads contend for the one lock).

Elsewhere than Linux with glibc these do nothing.
"""

from __future__ import annotations

import ctypes
import os
import platform

#: The environment variable that keeps glibc's own allocator settings.
OPT_OUT = "JAXARENA_SYSTEM_MALLOC"

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc's mallopt parameter numbers
_KEEP = 2**31 - 1  # mallopt takes an int: 2 GiB, past any one buffer XLA allocates here


def _libc():
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None)  # the running process's symbols, glibc's among them
    except OSError:
        return None


def keep_freed_memory(*, one_arena: bool = False) -> bool:
    """Raise glibc's mmap and trim thresholds, so freed large blocks stay in the process for reuse.

    `one_arena` also makes threads share the main arena; call it before JAX
    starts its threads (before the first computation), since a thread keeps
    the arena it already has. Returns whether the settings took effect
    (False off glibc).
    """
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    ok = [libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(_KEEP)), libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(_KEEP))]
    if one_arena:
        ok.append(libc.mallopt(_M_ARENA_MAX, ctypes.c_int(1)))
    return all(ok)


def apply_default() -> bool:
    """What `import jaxarena` runs: keep freed memory (one arena per thread as usual) unless opted out."""
    if os.environ.get(OPT_OUT, "") == "1":
        return False
    return keep_freed_memory()


#: Whether `import jaxarena` changed the allocator's thresholds.
APPLIED = apply_default()

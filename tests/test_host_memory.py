"""`import jaxarena` keeps freed large blocks in the process (glibc), unless JAXARENA_SYSTEM_MALLOC=1."""

import json
import os
import subprocess
import sys

import pytest

from jaxarena import host_memory

glibc_only = pytest.mark.skipif(host_memory._libc() is None, reason="needs Linux with glibc")

# A child process: import jaxarena, then allocate a 48 MB block and report how many bytes
# glibc serves by mmap (mallinfo2's hblkhd) while it is held. 48 MB is above glibc's
# largest dynamic mmap threshold (32 MB), so without the setting it is always mmapped.
_CHILD = """
import ctypes, json
import numpy as np
import jaxarena
from jaxarena import host_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
before = libc.mallinfo2().hblkhd
block = np.ones(48 * 2**20, np.uint8)
during = libc.mallinfo2().hblkhd
print(json.dumps({"applied": host_memory.APPLIED, "mmapped_growth": during - before}))
"""


def _child(env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k != host_memory.OPT_OUT} | env_extra
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc_only
def test_import_keeps_large_blocks_off_mmap():
    kept = _child({})
    assert kept["applied"] is True
    assert kept["mmapped_growth"] < 2**20, kept


@glibc_only
def test_opt_out_leaves_glibc_alone():
    system = _child({host_memory.OPT_OUT: "1"})
    assert system["applied"] is False
    assert system["mmapped_growth"] >= 48 * 2**20, system


def test_off_glibc_it_reports_no_change(monkeypatch):
    monkeypatch.setattr(host_memory, "_libc", lambda: None)
    assert host_memory.keep_freed_memory() is False

#!/usr/bin/env python
"""Reproduce the paper's evaluation protocol: `python scripts/evaluate.py --help`.

A thin wrapper around `jaxarena.protocol.cli.main` (also installed as the
`jaxarena-evaluate` console script).
"""

import sys

from jaxarena.protocol.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

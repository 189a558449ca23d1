"""The planner -> coder -> critic loop (SMAC-R1): a thin wrapper over `jaxarena.coder.cli`.

python scripts/coder.py --llm embedded --k 2 --rounds 1
python scripts/coder.py --help
"""

import sys

from jaxarena.coder.cli import main

if __name__ == "__main__":
    sys.exit(main())

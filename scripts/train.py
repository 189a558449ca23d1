"""Train the shared NPC policy with PPO: a thin wrapper over `jaxarena.algorithms.train_loop`.

python scripts/train.py --combination B --total-steps 2e7 --out runs/b
python scripts/train.py --help
"""

import sys

from jaxarena.algorithms.train_loop import main

if __name__ == "__main__":
    sys.exit(main())

"""A first look at the arena: a random squad against each bot, then a GIF.

    python scripts/demo.py [--episodes 1000] [--out out/demo]

Runs every bot's batch of episodes as one jitted, vmapped rollout, prints
the outcome shares, and writes a GIF of one episode per bot.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

from jaxarena.cli_errors import ArgumentParser, cli_main
from jaxarena.names import BOT_TYPES, OUTCOMES
from jaxarena.policies import random_policy
from jaxarena.registry import make
from jaxarena.render import record_episode, render_frames, write_gif
from jaxarena.runner import make_runner


def random_squad_outcomes(bot: str, episodes: int, seed: int) -> np.ndarray:
    """Outcome (1 NPC win, 2 bot win, 3 timeout) of `episodes` random-squad episodes."""
    env, params = make("Arena-v0", bot=bot)
    run = make_runner(env, params, random_policy, 0, episodes)
    return np.asarray(run(None, params, jax.random.key(seed)).outcome)


@cli_main("demo.py")
def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="demo.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1000, help="episodes per bot")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="out/demo", help="folder for the GIFs")
    parser.add_argument("--every", type=int, default=2, help="keep every n-th tick as a GIF frame")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be at least 1")

    out = Path(args.out)
    for bot in BOT_TYPES:
        t0 = time.perf_counter()
        outcome = random_squad_outcomes(bot, args.episodes, args.seed)
        shares = {OUTCOMES[k]: round(float(np.mean(outcome == k)), 3) for k in (1, 2, 3)}
        elapsed = time.perf_counter() - t0
        env, params = make("Arena-v0", bot=bot)
        recording = record_episode(env, params, random_policy, jax.random.key(args.seed))
        gif = write_gif(
            render_frames(recording, params, every=args.every), out / f"random_vs_{bot}.gif", 0.1 * args.every
        )
        print(
            json.dumps(
                {
                    "bot": bot,
                    "episodes": args.episodes,
                    "random_squad": shares,
                    "seconds": round(elapsed, 2),
                    "gif": str(gif),
                }
            )
        )
    print(f"GIFs written to {out.resolve()}")


if __name__ == "__main__":
    main()

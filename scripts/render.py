"""Record one episode and write it as a GIF (and optionally PNG frames).

python scripts/render.py --bot balanced --out out/episode.gif [--policy B --tag 2] [--png-dir out/frames]

--policy is "random", a packaged policy ("A", "B") or a training run directory.
"""

from __future__ import annotations

import argparse
import sys

import jax

import jaxarena
from jaxarena.cli_errors import ArgumentParser, cli_main
from jaxarena.policies import random_policy
from jaxarena.render import record_episode, render_frames, write_gif, write_png_frames


@cli_main("render.py")
def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="render.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bot", default="balanced", choices=jaxarena.BOT_TYPES)
    parser.add_argument("--policy", default="random", help="'random', 'A', 'B' or a training run directory")
    parser.add_argument("--tag", type=int, default=0, choices=range(jaxarena.NUM_TAGS), help="fixed strategy tag")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=2, help="keep every n-th tick as a frame")
    parser.add_argument("--out", default="out/episode.gif")
    parser.add_argument("--png-dir", default=None, help="also write PNG frames here")
    args = parser.parse_args(argv)
    policy, policy_params, env_id = random_policy, None, "Arena-v0"
    if args.policy != "random":
        from jaxarena.algorithms.checkpoint import load_policy

        try:
            policy, policy_params = load_policy(args.policy)
        except FileNotFoundError as exc:
            parser.error(f"--policy {args.policy!r}: {exc}")
        env_id = policy.env_id

    env, params = jaxarena.make(env_id, bot=args.bot)
    recording = record_episode(env, params, policy, jax.random.key(args.seed), policy_params, tag=args.tag)
    frames = render_frames(recording, params, every=args.every)
    gif = write_gif(frames, args.out, 0.1 * args.every)
    print(f"{jaxarena.OUTCOMES[recording.outcome]} after {recording.length * float(params.dt):.1f} s; GIF: {gif}")
    if args.png_dir:
        print(f"{len(write_png_frames(frames, args.png_dir))} PNG frames in {args.png_dir}")


if __name__ == "__main__":
    sys.exit(main())

"""Record one episode and write it as a GIF (and optionally PNG frames).

python scripts/render.py --bot balanced --out out/episode.gif [--policy random] [--png-dir out/frames]
"""

from __future__ import annotations

import argparse
import sys

import jax

import jaxarena
from jaxarena.render import random_policy, record_episode, render_frames, write_gif, write_png_frames


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bot", default="balanced", choices=jaxarena.BOT_TYPES)
    parser.add_argument("--policy", default="random", help="'random' (more policies arrive with training)")
    parser.add_argument("--tag", type=int, default=0, choices=range(jaxarena.NUM_TAGS), help="fixed strategy tag")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=2, help="keep every n-th tick as a frame")
    parser.add_argument("--out", default="out/episode.gif")
    parser.add_argument("--png-dir", default=None, help="also write PNG frames here")
    args = parser.parse_args(argv)
    if args.policy != "random":
        parser.error(f"unknown policy {args.policy!r}; available: random")

    env, params = jaxarena.make("Arena-v0", bot=args.bot)
    tagged_env = _TaggedArena(env, args.tag)
    recording = record_episode(tagged_env, params, random_policy, jax.random.key(args.seed))
    frames = render_frames(recording, params, every=args.every)
    gif = write_gif(frames, args.out, 0.1 * args.every)
    print(f"{jaxarena.OUTCOMES[recording.outcome]} after {recording.length * float(params.dt):.1f} s; GIF: {gif}")
    if args.png_dir:
        print(f"{len(write_png_frames(frames, args.png_dir))} PNG frames in {args.png_dir}")


class _TaggedArena(jaxarena.Arena):
    """The same arena, with a fixed tag set at every reset."""

    def __init__(self, env: jaxarena.Arena, tag: int):
        super().__init__(env.default_params)
        self._tag = tag

    def reset(self, key, params=None):
        obs, state = super().reset(key, params)
        state = self.set_tag(state, self._tag)
        return jaxarena.observe(state, params or self.default_params), state


if __name__ == "__main__":
    sys.exit(main())

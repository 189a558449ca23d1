"""Paired play: the squad under given tag sources on the protocol's paired keys, and paired differences with CIs.

Choosers are compared the way the evaluation protocol compares combinations:
each plays the same squad on the protocol's keys of one seed, so episode n of
every chooser starts from the same spawn with the same random numbers, and
the difference between two choosers is taken episode by episode.

- `squad_setup`, `squad_runner`: the squad's pieces, and one compiled rollout
  that plays it under a tag source whose state (a table, a window) is a traced
  argument, on the protocol's keys of any seed.
- `versus_always_aggressive`, `win_cell`: a chooser's win rate and its paired
  difference from always Aggressive (what the stock LLM answers on `raid`),
  with bootstrap CIs, and the markdown cell that shows them.
- `write_result`: a result's JSON and markdown, written atomically.
- `study_parser`, `run_study`: the command line the studies in `studies/`
  share (the squad, its arena, the episodes, the output).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from jaxarena.cli_errors import ArgumentParser, UserError, interrupted
from jaxarena.files import write_atomic
from jaxarena.tag_sources import TagSource

from .squad_args import squad_args


def squad_setup(scenario: str, policy_spec: str, bots: Sequence[str], **overrides):
    """(env, {bot: EnvParams}, policy, policy_params): the squad's pieces on `scenario`, one compiled rollout for all.

    `overrides` replace env params for every bot (e.g. `decision_period_s`).
    """
    import jaxarena
    from jaxarena.algorithms.checkpoint import load_policy
    from jaxarena.protocol.policies import policy_env_id

    policy, policy_params = load_policy(policy_spec)
    env_id = policy_env_id(policy)
    bot_params = {bot: jaxarena.make(env_id, bot=bot, scenario=scenario)[1].replace(**overrides) for bot in bots}
    env = jaxarena.make(env_id, bot=bots[0], scenario=scenario)[0]
    return env, bot_params, policy, policy_params


def squad_runner(
    scenario: str, policy_spec: str, episodes: int, bots: Sequence[str], source: TagSource, **overrides
) -> Callable:
    """`run(bot, seed, tag_state) -> RolloutResult`: the squad under `source` on the protocol's keys of `seed`.

    `overrides` replace env params for every bot (e.g. `decision_period_s`); one compiled rollout serves all.
    """
    from jaxarena.protocol.config import cell_key_data
    from jaxarena.runner import make_runner

    env, bot_params, policy, policy_params = squad_setup(scenario, policy_spec, bots, **overrides)
    rollout = make_runner(env, bot_params[bots[0]], policy, source, episodes)

    def run(bot: str, seed: int, tag_state):
        return rollout(policy_params, bot_params[bot], jnp.asarray(cell_key_data(seed, bot)), tag_state=tag_state)

    return run


def _rounded(values) -> list[float]:
    return [round(float(v), 6) for v in values]


def versus_always_aggressive(wins: np.ndarray, always_aggressive: np.ndarray, *, n_boot: int, seed: int) -> dict:
    """A reader's win % with its bootstrap CI, and its paired difference from always Aggressive (pp, CI).

    `wins` and `always_aggressive` are (episodes,) 0/1 on the same keys, episode for episode.
    """
    from jaxarena.protocol.stats import bootstrap_rate_ci, paired_bootstrap_diff

    diff = paired_bootstrap_diff(wins, always_aggressive, n_boot=n_boot, seed=seed)
    return {
        "win_pct": round(100 * float(wins.mean()), 6),  # so 1,000 episodes record 10.1, not 10.100000000000001
        "win_ci": _rounded(bootstrap_rate_ci(wins.astype(np.int64), 1, n_boot=n_boot, seed=seed)),  # code 1: a win
        "minus_always_aggressive": _rounded(100 * x for x in diff),
    }


def win_cell(row: dict) -> str:
    """A markdown cell: "88% (+46.0 [+34.0, +58.0])", the win % and the paired difference from always Aggressive."""
    d = row["minus_always_aggressive"]
    return f"{row['win_pct']:.0f}% ({d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}])"


def write_result(out: str | Path, name: str, result: dict, markdown) -> Path:
    """OUT/NAME.json and OUT/NAME.md (`markdown(result)`), written atomically; OUT is made if missing."""
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    write_atomic(path / f"{name}.json", json.dumps(result, indent=2))
    write_atomic(path / f"{name}.md", markdown(result))
    return path


def study_parser(prog: str, description: str, name: str, *, held_out: bool = False, episodes: int = 100):
    """A study's parser with the arguments every study takes: the squad, its arena, the episodes, the output."""
    which = "held-out " if held_out else ""
    p = ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    squad_args(p)
    p.add_argument(
        "--episodes",
        type=int,
        default=episodes,
        help=f"{which}paired episodes per bot (the protocol's keys; default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=0, help=f"the protocol's seed of the {which}episodes")
    p.add_argument("--out", required=True, help=f"directory for {name}.json and {name}.md")
    return p


def run_study(
    prog: str, args, run: Callable[..., dict], markdown, name: str, counts: Sequence[str] = ("episodes",), **kwargs
) -> int:
    """Check the episode counts, play (`run`), print the table, say where it went; 130 after Ctrl-C.

    A study writes its result only at the end, so an interrupted one has nothing to resume.
    """
    for field in counts:
        if getattr(args, field) < 1:
            raise UserError(f"--{field.replace('_', '-')} must be at least 1, got {getattr(args, field)}")
    try:
        result = run(
            scenario=args.scenario,
            policy_spec=args.policy,
            out=args.out,
            episodes=args.episodes,
            seed=args.seed,
            bots=tuple(args.bots),
            **kwargs,
        )
    except KeyboardInterrupt:
        return interrupted(prog)
    print(markdown(result))
    print(f"written to {args.out}/{name}.json and {name}.md")
    return 0

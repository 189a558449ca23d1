"""Look first, then choose: what a reader of the bot's first moves wins at a short decision period.

On `raid` the squad under the stock LLM (always Aggressive) wins 42% against the
aggressive bot, and retreating at the first decision wins about 20 points more,
but the same first Retreat loses about 35 against the evasive bot: at the paper's
5 s period the first decision comes before either bot has moved, and it holds for
five seconds. At that cadence the history-bound study (`history_bound.py`) found
no reader of the prompt or of the bot's movement that gets round this.

At a shorter period the bot shows itself before the choice costs much: 0.2 s
after spawn the aggressive bot has moved toward the squad and the evasive one
away. The *look-first reader* decides every `decision_period_s` and, for the
first `window_s` seconds of an episode, answers Retreat wherever the bot moved
toward the squad since the previous decision (approach >= 0.2 of its reach,
`jaxarena.llm.deduction.approach_bin`); otherwise, and after the window, Aggressive. A
decision is in the window when its tick comes before the window's end. It reads
the clock and the bot's movement, which Table 10's prompt does not hold, so it
is a bound on what a chooser with a richer prompt and a faster period could win,
not a result of the LLM.

`look_first_report` plays it beside always-Aggressive on the protocol's paired
keys, with each decision's tag recorded, so a gain bought by giving up the fight
shows (the Retreat share and the episodes' durations are reported).

    python studies/look_first.py --scenario raid --policy B-obey-raid --period 0.2 --window 1.4 \\
        --out runs/raid-look-first
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.cli_errors import cli_main
from jaxarena.llm.deduction import TOWARD, approach_bin
from jaxarena.llm.history import APPROACH, blank_histories, push
from jaxarena.llm.tuning.paired_play import (
    run_study,
    squad_runner,
    study_parser,
    versus_always_aggressive,
    win_cell,
    write_result,
)
from jaxarena.names import BOT_TYPES, NPC_WIN, TAG_NAMES
from jaxarena.tag_sources import TagSource
from jaxarena.types import ticks

AGGRESSIVE, RETREAT = TAG_NAMES.index("Aggressive"), TAG_NAMES.index("Retreat")


def look_first_source() -> TagSource:
    """A tag source whose carry is (window_s () float32, the batch's histories); see the module docstring.

    Give the window as `run(..., tag_state=initial_carry(window_s, N))`: a traced
    argument, so always-Aggressive (a window of 0) runs in the same compiled rollout.
    """

    def step(carry, features, prev_tags, done, time_s, key, state=None, params=None):
        window_s, histories = carry
        histories = jax.vmap(push, in_axes=(0, 0, None))(histories, state, params)
        closing = approach_bin(histories.points[:, -1, APPROACH]) == TOWARD
        # In whole ticks, so float rounding of the clock cannot move a decision across the window's end.
        early = jnp.broadcast_to(ticks(time_s, params.dt), closing.shape) < ticks(window_s, params.dt)
        tags = jnp.where(early & closing, RETREAT, AGGRESSIVE).astype(jnp.int32)
        return tags, None, (window_s, histories)

    return TagSource(step, lambda n: initial_carry(0.0, n), reads_state=True)


def initial_carry(window_s: float, num_episodes: int):
    if not window_s >= 0.0:
        raise ValueError(f"the look window must be >= 0 seconds, got {window_s}")
    return jnp.float32(window_s), blank_histories(num_episodes)


def look_first_report(
    *,
    scenario: str,
    policy_spec: str,
    period_s: float,
    window_s: float,
    episodes: int = 100,
    seed: int = 0,
    bots: Sequence[str] = BOT_TYPES,
    n_boot: int = 10_000,
) -> dict:
    """The reader and always-Aggressive on the protocol's paired keys of `seed`, at `period_s`, per bot."""
    if not period_s > 0.0:
        raise ValueError(f"the decision period must be > 0 seconds, got {period_s}")
    initial_carry(window_s, 1)  # refuses a bad window before anything compiles
    run = squad_runner(scenario, policy_spec, episodes, bots, look_first_source(), decision_period_s=period_s)
    readers = {"always Aggressive": 0.0, "look first": window_s}
    report = {name: {} for name in readers}
    for bot in bots:
        results = {name: run(bot, seed, initial_carry(w, episodes)) for name, w in readers.items()}
        wins = {name: np.asarray(r.outcome == NPC_WIN, np.float64) for name, r in results.items()}
        for name, result in results.items():
            active = np.asarray(result.decision_active)
            tags = np.asarray(result.decision_tags)[active]
            report[name][bot] = {
                **versus_always_aggressive(wins[name], wins["always Aggressive"], n_boot=n_boot, seed=seed),
                "retreat_share": float(np.mean(tags == RETREAT)),
                "mean_duration_s": float(np.mean(np.asarray(result.duration_s))),
            }
    return {
        "scenario": scenario,
        "policy": policy_spec,
        "episodes": episodes,
        "seed": seed,
        "decision_period_s": period_s,
        "window_s": window_s,
        "bots": list(bots),
        "readers": report,
    }


def markdown(result: dict) -> str:
    bots = result["bots"]
    lines = [
        f"Scenario `{result['scenario']}`, squad `{result['policy']}`, a decision every "
        f"{result['decision_period_s']:g} s, {result['episodes']} paired episodes per bot (the protocol's keys of "
        f"seed {result['seed']}). Look first: in the first {result['window_s']:g} s, Retreat at a decision "
        "where the bot closed in since the last one; else, and after, Aggressive.",
        "",
        "| reader | " + " | ".join(bots) + " |",
        "|---|" + "---|" * len(bots),
    ]
    for name, row in result["readers"].items():
        cells = [
            f"{win_cell(row[bot])}; Retreat {100 * row[bot]['retreat_share']:.1f}% of decisions; "
            f"{row[bot]['mean_duration_s']:.0f} s"
            for bot in bots
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "In brackets: the paired difference from always Aggressive, pp [95% CI]; then the mean duration."]
    return "\n".join(lines) + "\n"


def run_look_first(*, out: str, **kwargs) -> dict:
    """`look_first_report`, written to OUT/look_first.json and .md."""
    result = look_first_report(**kwargs)
    write_result(out, "look_first", result, markdown)
    return result


def parser():
    p = study_parser("look_first.py", __doc__, "look_first")
    p.add_argument("--period", type=float, default=0.2, help="seconds between decisions (the paper's is 5)")
    p.add_argument("--window", type=float, default=1.4, help="seconds from spawn in which the reader may retreat")
    return p


@cli_main("look_first.py")
def main(argv=None) -> int:
    args = parser().parse_args(argv)
    return run_study(
        "look_first.py", args, run_look_first, markdown, "look_first", period_s=args.period, window_s=args.window
    )


if __name__ == "__main__":
    sys.exit(main())

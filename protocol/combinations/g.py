"""Combination G: B's squad under the LLM answering the glance prompt every 0.2 s.

The glance prompt (`jaxarena.llm.glance`) tells the LLM the time since the
fight began, the nearest NPC's distance and whether the bot closed in since
the last glance, 0.2 s before; a glance adapter (its option, `--glance-adapter`,
from `jaxarena-tune-llm glance`) is what the model learned to answer from play.
The model's most likely answer to each of the 18 prompts is computed once per
run and looked up in the rollout; a glance table (`jaxarena-tune-llm glance
--learner table`, 18 x 4 logits trained the same way without the LLM) plays
through the same option. G decides 25 times as often as B and reads
a prompt B's does not hold: a variant of B, beside it on the same paired
episodes. Its section gives what L's does (`l.versus_b`).
"""

from __future__ import annotations

import dataclasses
import math

from ..combination import Combination, Played, ReportSection
from ..playing import arena, compile_rollout, episodes, timed_call
from .l import print_versus_b, render_versus_b, versus_b


@dataclasses.dataclass(frozen=True)
class GOptions:
    """adapter: the glance adapter G's LLM answers with: a shipped name (e.g. smollm2-raid-glance) or a
    directory from `jaxarena-tune-llm glance`; G needs one."""

    adapter: str | None = None

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument(
            "--glance-adapter",
            default=None,
            metavar="NAME_OR_DIR",
            help="G's adapter: a shipped name, e.g. smollm2-raid-glance, or a directory from jaxarena-tune-llm glance "
            "(its adapter/, or the table/ of --learner table)",
        )

    @classmethod
    def from_args(cls, args) -> GOptions:
        return cls(adapter=args.glance_adapter)


def glance_table(context):
    """(the adapter's answer per glance prompt, its checksum), made once per run."""

    def make():
        from jaxarena.llm.glance_model import load_glance_table

        return load_glance_table(context.config.options_of("G").adapter)

    return context.shared("G.table", make)


def _play(context, label: str, bot: str, key, progress) -> Played:
    from jaxarena.llm.glance import GLANCE_PERIOD_S, glance_source, initial_carry

    c = context.config
    policy, params = context.resolve(c.policy_b)[:2]
    env, env_params = arena(context, policy, bot, shaped=True)
    env_params = env_params.replace(decision_period_s=GLANCE_PERIOD_S)
    table, _ = glance_table(context)
    # The run's episodes in glance periods (a run cut to a few of B's periods is cut as short here).
    periods = math.ceil(round(c.episode_s / GLANCE_PERIOD_S, 6))
    program, compile_s = context.program(
        label,
        lambda: compile_rollout(
            context,
            env,
            env_params,
            policy,
            params,
            glance_source(),
            tag_state=initial_carry(table, c.episodes),
            num_periods=periods,
        ),
    )
    result, wall = timed_call(program, params, env_params, key)
    return Played({"episodes": episodes(result, key, c.episodes)}, compile_s, wall)


def _preflight(context) -> None:
    """Before the first cell: the adapter is a glance adapter or table, and for an adapter the embedded
    model it was trained on is installed (a table plays without the LLM)."""
    from jaxarena.llm.adapters import adapter_kind, resolve_adapter
    from jaxarena.llm.backends.embedded import EmbeddedBackend
    from jaxarena.llm.preflight import preflight

    found = resolve_adapter(context.config.options_of("G").adapter, kind=("glance-adapter", "glance-table"))
    if adapter_kind(found) != "glance-table":
        preflight(EmbeddedBackend())


def _check(config) -> None:
    if "G" in config.combinations and not config.options_of("G").adapter:
        raise ValueError(
            "Combination G plays B's squad under the LLM answering the glance prompt: name its adapter with "
            "--glance-adapter (a shipped name, e.g. smollm2-raid-glance, or a directory from jaxarena-tune-llm glance)"
        )


def _identity(config) -> dict:
    # Only where G plays, under the flat name it had before options were grouped: an older command
    # keeps its run id.
    return {"glance_adapter": config.options_of("G").adapter} if "G" in config.combinations else {}


def _fingerprint(context, label: str) -> dict:
    from jaxarena.llm.glance import GLANCE_PERIOD_S

    table, checksum = glance_table(context)
    return {"glance_adapter": checksum, "table": [int(t) for t in table], "decision_period_s": GLANCE_PERIOD_S}


COMBINATION = Combination(
    name="G",
    about="B's squad under the LLM answering the glance prompt every 0.2 s (the adapter --glance-adapter)",
    squads=lambda context, label: {label: context.config.policy_b},
    play=_play,
    fingerprint=_fingerprint,
    check=_check,
    preflight=_preflight,
    options=GOptions,
    identity=_identity,
    sections=(
        ReportSection(
            key="glance_llm",
            rank=36,
            applies=lambda config: "G" in config.combinations,
            summarize=lambda results: versus_b(results, "G", results.config.options_of("G").adapter),
            render=lambda section: render_versus_b(
                section, f"### Glance LLM (G): B's squad under the LLM with glance adapter `{section['adapter']}`"
            ),
            console=lambda section: print_versus_b(section, f"glance LLM G ({section['adapter']})", "G"),
        ),
    ),
)

"""The coder's reward (SMAC-R1): -1 no code, -0.5 a program that fails, else its win rate.

    from jaxarena.coder.scoring import ScoreConfig, score_replies
    scores = score_replies([reply_text, ...], ScoreConfig(episodes_per_bot=1000))
    scores[0].reward, scores[0].win_rate["balanced"], scores[0].stats

A reply is scored in three steps:

1. `extract_code` finds the program (a fenced python block or a bare
   `def policy`). None: reward `NO_CODE` (-1).
2. `compile_program` checks, translates and traces it in a sandbox. A
   `ProgramError` (syntax, forbidden construct, wrong shape or dtype, ...),
   a failure while tracing it inside the batch, or an action outside 0..5
   during play: reward `PROGRAM_ERROR` (-0.5), with the message the critic
   reads.
3. Otherwise the program plays `episodes_per_bot` episodes against each
   bot, and the reward is the NPC win rate averaged over the bots. The
   critic also gets per-bot loss and timeout rates, damage dealt and taken,
   episode length and how often each action was used.

How the batch plays (one policy program on shared lanes, refilled from a job queue)
and which key each episode gets (paired across candidates): `batch_rollout`.
The types are in `score_types`, the critic's statistics in `score_stats`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .batch_rollout import rollout_policies, trace_error
from .score_stats import ok_score
from .score_types import Score, ScoreConfig, error_score, no_code_score, rollout_error_score

# The scoring entry points.
__all__ = ["score_policies", "score_replies", "score_sources"]


_UNSTABLE_KINDS = ("timeout", "memory")


def _compile(source: str):
    """(CompiledProgram, None) or (None, error Score)."""
    from .compile import compile_program
    from .program_error import ProgramError

    try:
        return compile_program(source), None
    except ProgramError as err:
        return None, error_score(str(err), err.kind, err.line)


def _score_group(policies: Sequence, config: ScoreConfig) -> list[Score]:
    """One policy program for `policies`; if it fails, each alone, so one bad program sinks only itself."""
    try:
        summaries = rollout_policies(policies, config)
    except Exception as exc:  # noqa: BLE001 - whatever a program raises is the critic's to read
        if len(policies) == 1:
            return [rollout_error_score(exc)]
        return [_score_group([p], config)[0] for p in policies]
    return [ok_score(summary, config) for summary in summaries]


def score_policies(policies: Sequence, config: ScoreConfig | None = None) -> list[Score]:
    """Scores jittable policies, `config.batch` per policy program: -0.5 for a trace failure or an invalid action."""
    config = config or ScoreConfig()
    scores: list[Score | None] = [trace_error(p) for p in policies]
    runnable = [i for i, s in enumerate(scores) if s is None]
    for start in range(0, len(runnable), config.batch):
        group = runnable[start : start + config.batch]
        for i, score in zip(group, _score_group([policies[i] for i in group], config), strict=True):
            scores[i] = score
    return scores


def score_sources(
    sources: Sequence[str | None],
    config: ScoreConfig | None = None,
    cache: dict[str, Score] | None = None,
    race=None,
    incumbent: Score | None = None,
) -> list[Score]:
    """Scores program sources (None: no code, -1), compiling each in the sandbox, then playing them in one batch.

    `cache` (source -> Score, for this `config`) is read and filled: a program met again, in this batch or
    an earlier one, is not played again; its first score stands.
    `race` (a `racing.RaceConfig`): race the programs instead of giving each the full budget; `incumbent`
    is an earlier best Score that sets the bar (`racing.race_policies`).
    """
    config = config or ScoreConfig()
    cache = {} if cache is None else cache
    scores: list[Score | None] = [None] * len(sources)
    compiled = {}
    first = {}  # source -> index of its first occurrence in this batch
    for i, source in enumerate(sources):
        if source is None:
            scores[i] = no_code_score()
            continue
        if source in cache:
            scores[i] = cache[source]
            continue
        if source in first:
            continue
        first[source] = i
        program, failed = _compile(source)
        if failed is not None:
            scores[i] = failed
        else:
            compiled[i] = program.policy
    if race is None:
        played = score_policies(list(compiled.values()), config)
    else:
        from .racing import race_policies

        played = race_policies(list(compiled.values()), config, race, incumbent)
    for i, score in zip(compiled, played, strict=True):
        scores[i] = score
    for source, i in first.items():
        # A compile that ran out of time or memory may pass on a less loaded machine: not remembered.
        if scores[i].error_kind not in _UNSTABLE_KINDS:
            cache[source] = scores[i]
    return [scores[first[s]] if score is None else score for s, score in zip(sources, scores, strict=True)]


def score_replies(replies: Sequence[str | None], config: ScoreConfig | None = None) -> list[Score]:
    """Scores LLM replies: extract the program (none: -1), compile (fails: -0.5), play (the mean win rate)."""
    from .extract import extract_code

    return score_sources([extract_code(r) for r in replies], config)

"""Racing: stop playing a candidate once it is shown worse than the best one, instead of always the full budget.

    from jaxarena.coder.racing import RaceConfig, race_policies
    scores = race_policies(policies, ScoreConfig(), RaceConfig(alpha=0.05))
    scores[i].reward, scores[i].episodes_per_bot   # the estimate, and the episodes per bot it rests on

The candidates play in looks of growing size (`RaceConfig.looks`: e.g. 30, 90, 270, 1,000
episodes per bot). After each look, each candidate's mean win rate gets a confidence
interval, and a candidate whose upper bound is below the best lower bound (the incumbent's)
stops: with the chosen confidence, it is worse than the incumbent. Candidates still racing at
the last look get the full budget, so the best one is always scored in full.

The intervals are Chernoff bounds for a Bernoulli mean in the KL form (tighter than
Hoeffding's, most of all near 0 and 1), on the episodes pooled over the bots and per bot
(`reward_bounds`). They hold
simultaneously with probability >= 1 - alpha over every candidate, side and look (Bonferroni:
each bound at alpha / (2 x looks x candidates)), so repeated looks do not inflate the error:
with probability >= 1 - alpha no candidate better than the incumbent is ever dropped. The
guarantee is for an incumbent fixed in advance: the coder loop's incumbent is the best of the
earlier rounds' candidates, scored on the same episodes, so there its lower bound is optimistic by
the selection (the loop still gives every candidate that stays in the race its full score).

Episodes are the scorer's (`batch_rollout`): episode e against bot b has the same key as in
full scoring, so a candidate raced to n episodes has played exactly full scoring's first n, and
its score is full scoring's on those n. One policy program and one set of lanes per batch serve
every look, and the lanes do not wait for a look's last episode: idle ones play ahead
(`RaceConfig.speculate`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from jaxarena.names import NPC_WIN, bot_index

from .batch_rollout import LONGEST_FIRST, LanePool, trace_error
from .score_stats import ok_score, summarize
from .score_types import Score, ScoreConfig, rollout_error_score

_FIELDS = ("outcome", "t", "damage_dealt", "damage_taken", "counts", "invalid")


@dataclasses.dataclass(frozen=True)
class RaceConfig:
    """How a race looks at its candidates.

    first: episodes per bot of the first look; each later look has `growth` times as many (rounded),
      the last one the full `episodes_per_bot`.
    alpha: the chance, over the whole race, that any candidate better than the incumbent is dropped.
    lanes: at most this many episodes side by side while racing (never more than `ScoreConfig.lanes`;
      None: those). Every look runs until its longest episode ends (120 s against a bot that is
      never caught), and the early looks hold few jobs, so fewer lanes waste less there
      (docs/coder.md, "Racing", measures 512 and 2,048).
    speculate: play ahead. Lanes left idle while a look's last episodes end play the next look's
      episodes of the candidates still racing, so a look does not end in a tail of idle lanes.
      Those of a candidate dropped at the look are wasted; nothing else changes: the same
      episodes, decisions and scores either way (tested, on `LanePool`'s lane counts).
    """

    first: int = 30
    growth: float = 3.0
    alpha: float = 0.05
    lanes: int | None = 512
    speculate: bool = True

    def __post_init__(self):
        if not isinstance(self.first, int) or self.first < 1:
            raise ValueError(f"first must be a positive int, got {self.first!r}")
        if not self.growth > 1.0:
            raise ValueError(f"growth must be above 1, got {self.growth!r}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")
        if self.lanes is not None and (not isinstance(self.lanes, int) or self.lanes < 1):
            raise ValueError(f"lanes must be a positive int or None, got {self.lanes!r}")
        if not isinstance(self.speculate, bool):
            raise ValueError(f"speculate must be True or False, got {self.speculate!r}")

    def looks(self, episodes_per_bot: int) -> tuple[int, ...]:
        """Episodes per bot played by each look's end (growing; the last is `episodes_per_bot`)."""
        out, n = [], float(self.first)
        while round(n) < episodes_per_bot:
            if not out or round(n) > out[-1]:  # a slow growth rounds to the same look twice: skip it
                out.append(round(n))
            n *= self.growth
        return (*out, episodes_per_bot)


def look_delta(alpha: float, looks: int, candidates: int) -> float:
    """The error allowed to one one-sided bound: alpha split over both sides of every look and candidate."""
    return alpha / (2 * looks * candidates)


def _kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """KL divergence between Bernoulli(p) and Bernoulli(q), with 0 log 0 = 0."""
    q = np.clip(q, 1e-15, 1 - 1e-15)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(p > 0, p * np.log(p / q), 0.0)
        b = np.where(p < 1, (1 - p) * np.log((1 - p) / (1 - q)), 0.0)
    return a + b


def kl_bounds(wins: np.ndarray, n: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Chernoff (KL) bounds on a Bernoulli mean from `wins` of `n`: each side fails with chance <= delta.

    The upper bound is the largest q with n kl(wins/n, q) <= log(1/delta), the lower the smallest;
    found by bisection (60 halvings: far below float32 win rates). n = 0 gives [0, 1].
    """
    wins, n = np.asarray(wins, np.float64), np.asarray(n, np.float64)
    wins, n = np.broadcast_arrays(wins, n)
    p = np.where(n > 0, wins / np.maximum(n, 1), 0.5)
    budget = math.log(1.0 / delta)

    def search(lo, hi, inside_at_lo: bool):
        for _ in range(60):
            mid = (lo + hi) / 2
            ok = n * _kl(p, mid) <= budget
            # Keep the half whose inner end is still inside the confidence set.
            lo, hi = (
                (np.where(ok, mid, lo), np.where(ok, hi, mid))
                if inside_at_lo
                else (np.where(ok, lo, mid), np.where(ok, mid, hi))
            )
        return lo if inside_at_lo else hi

    upper = search(p.copy(), np.ones_like(p), inside_at_lo=True)
    lower = search(np.zeros_like(p), p.copy(), inside_at_lo=False)
    return np.where(n > 0, lower, 0.0), np.where(n > 0, upper, 1.0)


def reward_bounds(wins: np.ndarray, n: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on each candidate's mean win rate over the bots, from `wins` (K, bots) of `n` (K,) each.

    Two bounds, each allowed half of `delta`, and their intersection:
    - pooled: the reward is the mean of bots x n independent Bernoulli outcomes with different
      means. Their sum's moment generating function is at most that of a binomial with their mean
      (the product of the factors 1 + p_i (e^t - 1) is at most their mean to the power bots x n),
      so the binomial's Chernoff bound holds for it;
    - per bot: each bot's bound at delta / (2 x bots), averaged; much tighter when win rates sit
      near 0 or 1 (a melee squad wins ~100% against two bots and ~0% against the evasive one).
    """
    wins, n = np.asarray(wins), np.asarray(n)
    bots = wins.shape[-1]
    lo_pooled, hi_pooled = kl_bounds(wins.sum(axis=-1), n * bots, delta / 2)
    lo_bot, hi_bot = kl_bounds(wins, n[..., None], delta / (2 * bots))
    return np.maximum(lo_pooled, lo_bot.mean(axis=-1)), np.minimum(hi_pooled, hi_bot.mean(axis=-1))


def still_racing(wins: np.ndarray, n: np.ndarray, racing: np.ndarray, delta: float) -> np.ndarray:
    """The racing rule on counts: a racing candidate stays unless its upper bound is below the best lower bound.

    wins (K, bots) and n (K,) count every candidate's episodes so far, dropped ones and an incumbent
    that is not racing (its counts still set the bar). Returns the new (K,) racing mask. Leading
    axes are independent races.
    """
    lo, hi = reward_bounds(wins, n, delta)
    return np.asarray(racing, bool) & (hi >= lo.max(axis=-1, keepdims=True))


def incumbent_counts(score: Score, bots: Sequence[str]) -> tuple[np.ndarray, int] | None:
    """(wins per bot, episodes per bot) of an earlier candidate's score, or None if it has none for `bots`."""
    if score.status != "ok" or score.episodes_per_bot < 1 or set(score.win_rate) != set(bots):
        return None
    n = score.episodes_per_bot
    return np.asarray([round(score.win_rate[b] * n) for b in bots], np.int64), n


class _Batch:
    """One policy program for some candidates, on lanes kept by every look; split into singles if it fails."""

    def __init__(self, members: list[int], policies: Sequence, config: ScoreConfig):
        self.members, self.policies, self.config = members, policies, config
        self.pool: LanePool | None = None
        self.singles: list[_Batch] | None = None
        self.failed: dict[int, Score] = {}

    def play(self, racing: set[int], bots: list[int], start: int, stop: int, store: dict, ahead_until: int) -> None:
        """Plays episodes [start, stop) against every bot for the members still racing; results into `store`.

        Lanes left idle before the last of them ends play ahead: the members' episodes
        [stop, ahead_until), the next look's, which that look then does not play again.
        """
        live = [c for c in self.members if c in racing and c not in self.failed]
        if not live:
            self.pool = None  # every member is out: free its lanes
        if not live or start >= stop:
            return
        if self.singles is not None:
            for single in self.singles:
                single.play(racing, bots, start, stop, store, ahead_until)
                self.failed.update(single.failed)
            return
        if self.pool is None:
            self.pool = LanePool([self.policies[c] for c in self.members], self.config)
        local = {c: i for i, c in enumerate(self.members)}
        order = sorted(bots, key=LONGEST_FIRST.index)

        def jobs(first: int, end: int) -> np.ndarray:
            rows = [(local[c], b, e) for b in order for e in range(first, end) for c in live]
            return np.asarray(rows, np.int64).reshape(-1, 3)

        now = jobs(start, stop)
        ids = self.pool.job_ids(*np.concatenate([now, jobs(stop, ahead_until)]).T)
        try:
            self.pool.play(ids, len(now))
        except Exception as exc:  # noqa: BLE001 - whatever a program raises is the critic's to read
            if len(self.members) == 1:
                self.failed[self.members[0]] = rollout_error_score(exc)
                return
            self.singles, self.pool = [_Batch([c], self.policies, self.config) for c in self.members], None
            self.play(racing, bots, start, stop, store, ahead_until)
            return
        played = {name: column[ids[: len(now)]] for name, column in self.pool.results.items()}
        for c in live:
            for b in order:
                rows = (now[:, 0] == local[c]) & (now[:, 1] == b)
                for name in _FIELDS:
                    store[c][name][b][now[rows, 2]] = played[name][rows]


def _empty_store(config: ScoreConfig, bots: list[int]) -> dict:
    e = config.episodes_per_bot
    shapes = {"counts": (e, 6)}
    dtypes = {"damage_dealt": np.float32, "damage_taken": np.float32}
    return {name: {b: np.zeros(shapes.get(name, (e,)), dtypes.get(name, np.int32)) for b in bots} for name in _FIELDS}


def _raced_score(store: dict, n: int, config: ScoreConfig, bots: list[int]) -> Score:
    """A candidate's Score from its first `n` episodes per bot, as full scoring would give on those."""
    results = {name: np.concatenate([store[name][b][:n] for b in bots]) for name in _FIELDS}
    jobs = {"cand": np.zeros(n * len(bots), np.int32), "bot": np.repeat(np.asarray(bots, np.int32), n)}
    score = ok_score(summarize(results, jobs, 1, config)[0], config)
    return dataclasses.replace(score, episodes_per_bot=n) if score.status == "ok" else score


def race_policies(
    policies: Sequence,
    config: ScoreConfig | None = None,
    race: RaceConfig | None = None,
    incumbent: Score | None = None,
) -> list[Score]:
    """Scores jittable policies by racing; each Score's `episodes_per_bot` is the episodes it got.

    `incumbent`: an earlier candidate's full Score (e.g. the loop's best so far); it is not played, but
    its win rates set the bar from the first look. A trace failure or an invalid action is -0.5, as in
    `score_policies`; a dropped candidate's reward is its estimate on the episodes it played.
    """
    config, race = config or ScoreConfig(), race or RaceConfig()
    if race.lanes is not None:
        config = dataclasses.replace(config, lanes=min(race.lanes, config.lanes))
    scores: list[Score | None] = [trace_error(p) for p in policies]
    runnable = [i for i, s in enumerate(scores) if s is None]
    if not runnable:
        return scores
    bots = [bot_index(b) for b in config.bots]
    prior = incumbent_counts(incumbent, config.bots) if incumbent is not None else None
    looks = race.looks(config.episodes_per_bot)
    delta = look_delta(race.alpha, len(looks), len(runnable) + (prior is not None))
    batches = [_Batch(runnable[i : i + config.batch], policies, config) for i in range(0, len(runnable), config.batch)]
    store = {c: _empty_store(config, bots) for c in runnable}
    played = dict.fromkeys(runnable, 0)
    racing = set(runnable)
    start = 0
    for look, stop in enumerate(looks):
        ahead_until = looks[look + 1] if race.speculate and look + 1 < len(looks) else stop
        for batch in batches:
            batch.play(racing, bots, start, stop, store, ahead_until)
            racing -= set(batch.failed)
        for c in racing:
            played[c] = stop
        start = stop
        # An invalid action fixes a candidate's reward at -0.5 whatever it wins: it stops racing, and
        # neither it nor a failed program sets the bar.
        failed = {c for batch in batches for c in batch.failed} | {
            c for c in played if any(store[c]["invalid"][b][: played[c]].any() for b in bots)
        }
        racing -= failed
        rows = sorted(racing) + sorted(set(played) - racing - failed)
        if not racing:
            break
        wins = np.asarray([[np.sum(store[c]["outcome"][b][: played[c]] == NPC_WIN) for b in bots] for c in rows])
        n = np.asarray([played[c] for c in rows])
        mask = np.asarray([c in racing for c in rows])
        if prior is not None:
            wins, n, mask = np.vstack([wins, prior[0]]), np.append(n, prior[1]), np.append(mask, False)
        keep = still_racing(wins, n, mask, delta)
        racing = {c for c, k in zip(rows, keep, strict=False) if k}
    failed = {c: s for batch in batches for c, s in batch.failed.items()}
    for c in runnable:
        scores[c] = failed.get(c) or _raced_score(store[c], played[c], config, bots)
    return scores

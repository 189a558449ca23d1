"""How well a coder writes programs: replies to held-out plans, scored as the loop scores them.

For each held-out plan, the coder writes `candidates` replies (the loop's
own prompt, "candidate i of k", so each is sampled with its own key). Each
reply is scored by `score_sources`: -1 without code, -0.5 when the sandbox,
compiler or play refuses it, else its mean win rate. The summary gives the
share of replies with code, the share that compiled and ran, the mean
reward and the best program's win rate per bot.

Two evaluations of the same prompts (same plans, candidates and seed, so
the same episodes score each program) compare reply by reply:
`paired_comparison`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from ..extract import extract_code
from ..loop_config import CODER_TOP_P
from ..prompts import coder_prompt
from ..score_types import Score, ScoreConfig
from ..scoring import score_sources


def coder_prompts(reference: str, task: str, plans: Sequence[str], candidates: int) -> list:
    """The loop's coder prompts: every plan, candidates 1..k."""
    return [coder_prompt(reference, task, plan, i, candidates) for plan in plans for i in range(1, candidates + 1)]


def summarize(scores: Sequence[Score]) -> dict:
    """Shares with code and that ran, the mean reward, and the best program's win rates."""
    n = len(scores)
    rewards = np.array([s.reward for s in scores], float)
    best = max(scores, key=lambda s: s.reward) if scores else None
    return {
        "replies": n,
        "with_code": float(np.mean([s.status != "no_code" for s in scores])) if n else 0.0,
        "compiled": float(np.mean([s.status == "ok" for s in scores])) if n else 0.0,
        "mean_reward": float(rewards.mean()) if n else 0.0,
        "reward_ci95": float(1.96 * rewards.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0,
        "best_reward": float(best.reward) if best else 0.0,
        "best_win_rate": dict(best.win_rate) if best else {},
    }


def evaluate_coder(
    generator,
    reference: str,
    task: str,
    plans: Sequence[str],
    *,
    candidates: int,
    score_config: ScoreConfig,
    temperature: float = 0.7,
    progress: Callable[[str], None] = print,
) -> tuple[dict, list[dict]]:
    """(summary, one record per reply) for `generator`'s replies to `plans`."""
    prompts = coder_prompts(reference, task, plans, candidates)
    t0 = time.perf_counter()
    replies = generator.generate([(p.system, p.user) for p in prompts], temperature=temperature, top_p=CODER_TOP_P)
    gen_s = time.perf_counter() - t0
    failed = [r.error for r in replies if r.error]
    if failed:
        raise ValueError(f"the coder could not answer {len(failed)} of {len(replies)} prompts: {failed[0]}")
    progress(f"generated {len(replies)} replies in {gen_s:.0f} s; scoring")
    sources = [extract_code(r.text) for r in replies]
    scores = score_sources(sources, score_config)
    summary = {
        **summarize(scores),
        "generate_s": round(gen_s, 1),
        "tokens": int(sum(len(r.token_ids) for r in replies)),
    }
    records = [
        {"user": p.user, "reply": r.text, "reward": s.reward, "status": s.status, "error": s.error}
        for p, r, s in zip(prompts, replies, scores, strict=True)
    ]
    return summary, records


def paired_comparison(before: Sequence[dict], after: Sequence[dict]) -> dict:
    """After minus before, reply by reply, for two evaluations' records of the same prompts.

    The difference in mean reward has a 95% t-interval over the paired
    replies, the protocol's paired percentile bootstrap (10,000 resamples,
    seeded) beside it, and a Wilcoxon signed-rank p-value (ties, equal
    rewards, dropped).
    """
    from scipy import stats

    from jaxarena.protocol.stats import paired_bootstrap_diff

    if [r["user"] for r in before] != [r["user"] for r in after]:
        raise ValueError(
            "the two evaluations answered different prompts: evaluate both with the same --plans, --candidates, "
            "--seed and --held-out"
        )
    n = len(before)
    if n < 2:
        raise ValueError(f"a paired comparison needs at least 2 replies, got {n}")
    a, b = (np.array([r["reward"] for r in rs], float) for rs in (before, after))
    diff = b - a
    half = float(stats.t.ppf(0.975, n - 1) * diff.std(ddof=1) / np.sqrt(n))
    changed = diff != 0
    p = float(stats.wilcoxon(diff[changed]).pvalue) if changed.sum() >= 1 else 1.0
    _, boot_low, boot_high = paired_bootstrap_diff(b, a)
    ran = [sum(r["status"] == "ok" for r in rs) for rs in (before, after)]
    return {
        "replies": n,
        "ran_before": ran[0],
        "ran_after": ran[1],
        "mean_reward_before": float(a.mean()),
        "mean_reward_after": float(b.mean()),
        "difference": float(diff.mean()),
        "difference_ci95": [float(diff.mean()) - half, float(diff.mean()) + half],
        "difference_bootstrap_ci95": [boot_low, boot_high],
        "wilcoxon_p": p,
        "better": int((diff > 0).sum()),
        "worse": int((diff < 0).sum()),
        "same": int((~changed).sum()),
    }

"""`report.md` of a coder run: rounds, skills, the best program with its per-bot win rates, and a GIF of it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

GIF_NAME = "best.gif"
GIF_RECORD = "best_gif.json"  # which program (and settings) best.gif shows, so a resumed run does not redraw it


def _render_gif(path: Path, source: str, config) -> str:
    """Plays one episode of `source` against `config.gif_bot` and writes it as a GIF; returns a one-line outcome."""
    import jax

    import jaxarena
    from jaxarena.render import record_episode, render_frames, write_gif

    from .compile import compile_program

    program = compile_program(source)
    env, params = jaxarena.make("Arena-v0", scenario=config.scenario, bot=config.gif_bot)
    recording = record_episode(env, params, program.policy, jax.random.key(config.seed))
    write_gif(render_frames(recording, params, every=2), path, 0.2)
    return f"{jaxarena.OUTCOMES[recording.outcome]} after {recording.length * float(params.dt):.1f} s"


def _cached_gif(run_dir: Path, source: str, config) -> str:
    """`_render_gif` unless best.gif already shows this program with these settings."""
    record_path = run_dir / GIF_RECORD
    key = {"source": source, "scenario": config.scenario, "bot": config.gif_bot, "seed": config.seed}
    if record_path.exists() and (run_dir / GIF_NAME).exists():
        record = json.loads(record_path.read_text())
        if record.get("key") == key:
            return record["outcome"]
    outcome = _render_gif(run_dir / GIF_NAME, source, config)
    record_path.write_text(json.dumps({"key": key, "outcome": outcome}) + "\n")
    return outcome


def write_report(run_dir: Path, config, events: list[dict], task: str) -> dict | None:
    """Writes `run_dir/report.md` (and `best.gif` when the best program ran); returns the best candidate."""
    from .run_log import best_candidate

    run_dir = Path(run_dir)
    best = best_candidate(events)
    scored = sorted((e for e in events if e["event"] == "scored"), key=lambda e: e["round"])
    critics = {e["round"]: e for e in events if e["event"] == "critic"}
    plans = {e["round"]: e for e in events if e["event"] == "plan"}
    statuses = Counter(s["status"] for e in scored for s in e["scores"])
    total = sum(statuses.values())
    model = config.model or ""
    out = [
        f"# Coder run `{run_dir.name}`",
        "",
        f"Backend `{config.llm}`{f' (model `{model}`)' if model else ''}; K = {config.k} candidates per round, "
        f"{len(scored)} of {config.rounds} rounds done; {config.episodes_per_bot} episodes per bot "
        f"({', '.join(config.bots)}), scenario `{config.scenario}`, seed {config.seed}.",
        "",
        f"Candidates: {total}; with a program that ran: {statuses['ok']}; failing program (-0.5): "
        f"{statuses['error']}; no code in the reply (-1): {statuses['no_code']}.",
        "",
        "## Rounds",
        "",
        "| round | step | rewards (candidates 1..K) | best | critic |",
        "|---|---|---|---|---|",
    ]
    for e in scored:
        r = e["round"]
        rewards = [s["reward"] for s in e["scores"]]
        step = "plan: " + ", ".join(plans[r]["skills"]) if r in plans else "fix"
        critic = critics.get(r, {}).get("decision", "")
        out.append(f"| {r} | {step} | {' '.join(f'{x:+.3f}' for x in rewards)} | {max(rewards):+.3f} | {critic} |")
    skills = scored[-1]["skills"] if scored else {}
    out += ["", "## Skills (SMAC-R1's r_i: running mean of rollout win rates; a failed program counts 0)", ""]
    if skills:
        out += ["| skill | r | rollouts |", "|---|---|---|"]
        out += [
            f"| {name} | {s['r']:.3f} | {s['n']} |" for name, s in sorted(skills.items(), key=lambda kv: -kv[1]["r"])
        ]
    else:
        out.append("None yet.")
    out += ["", "## Best program", ""]
    if best is None:
        out.append("No candidate has been scored yet.")
    elif best["score"].status != "ok":
        out.append(
            f"No program ran: the best reward is {best['score'].reward:+.1f} ({best['score'].status}), "
            f"round {best['round']}, candidate {best['candidate']}."
        )
        if best["score"].error:
            out += ["", "```", best["score"].error, "```"]
        if best["source"]:
            out += ["", "```python", best["source"].rstrip(), "```"]
    else:
        score = best["score"]
        out += [
            f"Round {best['round']}, candidate {best['candidate']}: reward {score.reward:.3f} (mean win rate over "
            f"{score.episodes_per_bot} episodes per bot).",
            "",
            "| bot | win | loss | timeout | damage dealt | damage taken | episode (s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for bot, s in score.stats.items():
            out.append(
                f"| {bot} | {100 * s['win']:.1f}% | {100 * s['loss']:.1f}% | {100 * s['timeout']:.1f}% | "
                f"{s['damage_dealt']:.0f} | {s['damage_taken']:.0f} | {s['episode_s']:.1f} |"
            )
        out += ["", "```python", best["source"].rstrip(), "```", ""]
        try:
            outcome = _cached_gif(run_dir, best["source"], config)
            out.append(f"![one episode against the {config.gif_bot} bot]({GIF_NAME}) ({outcome}, seed {config.seed})")
        except Exception as exc:  # noqa: BLE001 - a failed GIF must not lose the report
            out.append(f"(No GIF: {type(exc).__name__}: {exc})")
    out += ["", "## Task given to the planner, coder and critic", "", task, ""]
    (run_dir / "report.md").write_text("\n".join(out), encoding="utf-8")
    return best

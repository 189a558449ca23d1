"""The planner -> coder -> critic loop of SMAC-R1 (§3.2), with K candidates per round and R rounds.

Round r:
1. plan: in round 1, and whenever the previous critic said [Change Tactic],
   the planner plans at most 3 tactics (skills) from the task, the skill
   history with scores r_i and the past strategies' results;
2. code: the coder writes K candidate programs for the plan (when fixing:
   also the critic's suggestion and the program it read);
3. score: all K are scored in one batch (`scoring`: -1 no code, -0.5 a
   failing program, else the mean win rate over >= 1,000 episodes per
   bot); every skill of the plan then takes each candidate's rollout score
   G into its running mean, r_i = (r_i * n_i + G) / (n_i + 1) (eq. 4),
   where G is the win rate and a failed program's G is 0, as in the paper;
4. critic: reads the round's best candidate (code with line numbers, its
   error or statistics) and says [Change Tactic] (re-plan) or
   [Improve Tactic] (fix the code in the next round).

Everything goes to `<out>/<run>/`: `config.json`, `events.jsonl` (append-only:
one line per finished step, with prompts, replies, code and scores), readable
copies per round (`round_NN/`), and `report.md` with the best program, its
per-bot win rates and a GIF. A killed run resumes from `events.jsonl`: a step
whose line is there is never redone; a line cut off by the kill is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .extract import extract_code
from .loop_backend import check_backend, generate, make_loop_backend
from .loop_config import LoopConfig, LoopError
from .run_log import RunLog, prepare_run_dir, prompt_json, prompt_md, round_dir, write_text
from .score_types import Score
from .scoring import score_sources

# The loop's own names.
__all__ = ["Loop", "update_skills"]


def update_skills(skills: dict, names: list[str], scores: list[Score]) -> dict:
    """SMAC-R1's eq. 4 for every skill of the plan and every candidate: the running mean of rollout scores.

    The rollout score G is the win rate; a program that failed or was missing scores G = 0, as the paper
    sets the win rate to 0 when the code raises.
    """
    out = {name: dict(s) for name, s in skills.items()}
    for name in names:
        s = out.setdefault(name, {"r": 0.0, "n": 0})
        for score in scores:
            g = max(score.reward, 0.0)
            s["r"] = (s["r"] * s["n"] + g) / (s["n"] + 1)
            s["n"] += 1
    return out


def _best(scores: list[Score]) -> int:
    """The index of the best score (the first on ties)."""
    return max(range(len(scores)), key=lambda i: (scores[i].reward, -i))


class Loop:
    """One run: `Loop(config, run_dir).run()`. `backend` may be given (tests); else it is built from config."""

    def __init__(
        self,
        config: LoopConfig,
        run_dir: str | Path,
        *,
        backend=None,
        progress: Callable[[str], None] | None = print,
    ):
        from jaxarena import make

        from .language import reference_text
        from .prompts import task_information

        self.config = config
        self.run_dir = Path(run_dir)
        prepare_run_dir(self.run_dir, config)
        self.log = RunLog(self.run_dir / "events.jsonl")
        self.progress = progress or (lambda line: None)
        self._backend = backend
        self._coder_backend = None
        _, params = make("Arena-v0", scenario=config.scenario)
        self.task = task_information(params, config.scenario, config.episodes_per_bot, config.bots)
        self.reference = reference_text()
        self.score_config = config.score_config()
        self.cache: dict[str, Score] = {}
        for e in self.log.events:
            if e["event"] == "scored":
                for source, score in zip(e["sources"], e["scores"], strict=True):
                    # As `score_sources` does: a compile that ran out of time or memory may pass next time.
                    if source is not None and score["error_kind"] not in ("timeout", "memory"):
                        self.cache[source] = Score.from_json(score)

    @property
    def backend(self):
        if self._backend is None:
            self._backend = make_loop_backend(self.config)
            check_backend(self._backend)
        return self._backend

    @property
    def coder_backend(self):
        """The coder's backend: the run's, or one with the coder's adapter (`LoopConfig.coder_adapter`)."""
        if self.config.coder_adapter is None:
            return self.backend
        if self._coder_backend is None:
            self._coder_backend = make_loop_backend(self.config, adapter=self.config.coder_adapter)
        return self._coder_backend

    def _ask(self, prompts: list, backend=None) -> list:
        replies = generate(backend or self.backend, prompts)
        failed = [(i, r.error) for i, r in enumerate(replies) if r.error]
        if failed:
            raise LoopError(
                f"the {self.config.backend_name} backend failed on {len(failed)} of {len(prompts)} prompts "
                f"(first: {failed[0][1]}); fix it and run the same command again to resume"
            )
        return replies

    # The steps. Each appends its event only once its work is done, so a kill redoes at most that step.

    def _plan(self, r: int) -> dict:
        from .prompts import parse_skills, planner_prompt

        done = self.log.find("plan", r)
        if done is not None:
            return done
        skills = self._skills_before(r)
        history = self._strategy_history(r)
        last = self._round_best(r - 1)
        prompt = planner_prompt(self.task, skills, history, last)
        (answer,) = self._ask([prompt])
        reply = answer.text
        event = {"event": "plan", "round": r, "prompt": prompt_json(prompt), "reply": reply}
        event["latency_s"] = round(answer.latency_s, 2)
        event["skills"] = parse_skills(reply)
        self.log.append(event)
        write_text(round_dir(self.run_dir, r) / "plan.md", prompt_md(event["prompt"], reply))
        self.progress(f"round {r}: plan: {', '.join(event['skills'])}")
        return event

    def _code(self, r: int, plan: dict, fix: dict | None) -> list[dict]:
        from .prompts import coder_prompt

        k = self.config.k
        missing = [i for i in range(1, k + 1) if self.log.find("code", r, i) is None]
        if missing:
            prompts = [
                coder_prompt(
                    self.reference,
                    self.task,
                    plan["reply"],
                    i,
                    k,
                    suggestion=fix["reply"] if fix else None,
                    previous_code=fix.get("code") if fix else None,
                )
                for i in missing
            ]
            answers = self._ask(prompts, self.coder_backend)
            for i, prompt, answer in zip(missing, prompts, answers, strict=True):
                reply = answer.text
                code = extract_code(reply)
                event = {"event": "code", "round": r, "candidate": i, "prompt": prompt_json(prompt)}
                event.update(reply=reply, code=code, latency_s=round(answer.latency_s, 2))
                self.log.append(event)
                folder = round_dir(self.run_dir, r)
                write_text(folder / f"candidate_{i}.md", prompt_md(event["prompt"], reply))
                if code is not None:
                    write_text(folder / f"candidate_{i}.py", code)
        return [self.log.find("code", r, i) for i in range(1, k + 1)]

    def _score(self, r: int, plan: dict, codes: list[dict]) -> dict:
        done = self.log.find("scored", r)
        if done is not None:
            return done
        sources = [c["code"] for c in codes]
        race = self.config.race_config()
        incumbent = self._best_before(r) if race is not None else None
        scores = score_sources(sources, self.score_config, self.cache, race=race, incumbent=incumbent)
        skills = update_skills(self._skills_before(r), plan["skills"], scores)
        event = {
            "event": "scored",
            "round": r,
            "sources": sources,
            "scores": [s.to_json() for s in scores],
            "skills": skills,
        }
        self.log.append(event)
        folder = round_dir(self.run_dir, r)
        write_text(folder / "scores.json", json.dumps(event["scores"], indent=2) + "\n")
        for i, s in enumerate(scores, 1):
            detail = s.error.splitlines()[0] if s.error else _win_rates(s)
            self.progress(f"round {r} candidate {i}/{self.config.k}: reward {s.reward:+.3f} ({s.status}) {detail}")
        return event

    def _critic(self, r: int, plan: dict, scored: dict) -> dict:
        from .prompts import critic_prompt, parse_decision

        done = self.log.find("critic", r)
        if done is not None:
            return done
        scores = [Score.from_json(s) for s in scored["scores"]]
        best = _best(scores)
        others = [s for i, s in enumerate(scores) if i != best]
        code = scored["sources"][best]
        prompt = critic_prompt(self.task, plan["reply"], code, scores[best], r, others)
        (answer,) = self._ask([prompt])
        reply = answer.text
        decision, said = parse_decision(reply)
        event = {"event": "critic", "round": r, "candidate": None, "reviewed": best + 1, "code": code}
        event.update(prompt=prompt_json(prompt), reply=reply, decision=decision, explicit=said)
        event["latency_s"] = round(answer.latency_s, 2)
        self.log.append(event)
        write_text(round_dir(self.run_dir, r) / "critic.md", prompt_md(event["prompt"], reply))
        how = "" if said else " (no marker in the reply: improve)"
        self.progress(f"round {r}: critic reviewed candidate {best + 1}: {decision}{how}")
        return event

    # What earlier rounds left.

    def _skills_before(self, r: int) -> dict:
        scored = [e for e in self.log.events if e["event"] == "scored" and e["round"] < r]
        return max(scored, key=lambda e: e["round"])["skills"] if scored else {}

    def _best_before(self, r: int) -> Score | None:
        """The best program's score of the rounds before `r` (the bar a race starts from), or None."""
        best = [b for b in (self._round_best(x) for x in range(1, r)) if b is not None and b.status == "ok"]
        return max(best, key=lambda s: s.reward) if best else None

    def _round_best(self, r: int) -> Score | None:
        scored = self.log.find("scored", r)
        if scored is None:
            return None
        scores = [Score.from_json(s) for s in scored["scores"]]
        return scores[_best(scores)]

    def _plan_for(self, r: int) -> dict:
        plans = [e for e in self.log.events if e["event"] == "plan" and e["round"] <= r]
        return max(plans, key=lambda e: e["round"])

    def _strategy_history(self, r: int) -> list[tuple[list[str], float]]:
        """Each earlier plan's skills and the best reward any of its rounds reached."""
        out = []
        for e in sorted(
            (e for e in self.log.events if e["event"] == "plan" and e["round"] < r), key=lambda e: e["round"]
        ):
            rewards = [
                s["reward"]
                for x in self.log.events
                if x["event"] == "scored" and x["round"] < r and self._plan_for(x["round"]) is e
                for s in x["scores"]
            ]
            if rewards:
                out.append((e["skills"], max(rewards)))
        return out

    def run(self) -> dict:
        """Runs (or resumes) every round, then writes the report; returns the best candidate's record."""
        from .prompts import CHANGE
        from .report import write_report

        for r in range(1, self.config.rounds + 1):
            previous = self.log.find("critic", r - 1) if r > 1 else None
            replan = r == 1 or previous is None or previous["decision"] == CHANGE
            plan = self._plan(r) if replan else self._plan_for(r)
            codes = self._code(r, plan, None if replan else previous)
            scored = self._score(r, plan, codes)
            self._critic(r, plan, scored)
            best = self._round_best(r)
            self.progress(f"round {r}/{self.config.rounds} done: best reward {best.reward:+.3f}")
        best = write_report(self.run_dir, self.config, self.log.events, self.task)
        self.progress(f"report: {self.run_dir / 'report.md'}")
        return best


def _win_rates(score: Score) -> str:
    return " ".join(f"{bot} {100 * w:.1f}%" for bot, w in score.win_rate.items())

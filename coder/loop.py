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

import asyncio
import dataclasses
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxarena.cli_errors import UserError
from jaxarena.names import BOT_TYPES, bot_index
from jaxarena.scenarios import DEFAULT_SCENARIO, scenario_overrides

from .extract import extract_code
from .scoring import Score, ScoreConfig, score_sources

#: The Ollama model the docs' reproduction command uses (a code model, as SMAC-R1's coder).
DEFAULT_OLLAMA_MODEL = "qwen2.5-coder:7b"
#: Config fields that may change when a run resumes (they do not change what was recorded).
RESUMABLE = ("rounds", "host", "timeout_s")


class LoopError(UserError):
    """A run that cannot start or go on (bad config, backend failure); the message says what to do."""


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """One run of the loop. `llm` is a backend spec: "embedded", "ollama" or "gguf:PATH"."""

    llm: str = "embedded"
    model: str | None = None
    host: str | None = None
    k: int = 4
    rounds: int = 3
    seed: int = 0
    episodes_per_bot: int = 1000
    scenario: str = DEFAULT_SCENARIO
    bots: tuple[str, ...] = BOT_TYPES
    lanes: int = 2048
    max_tokens: int = 768
    temperature: float = 0.7
    timeout_s: float = 600.0
    gif_bot: str = "balanced"

    def __post_init__(self):
        from jaxarena.llm.backends import parse_llm_spec

        try:
            name, _ = parse_llm_spec(self.llm)
        except ValueError as exc:
            raise LoopError(str(exc)) from None
        if self.model is not None and name != "ollama":
            raise LoopError(f"--model names an Ollama model; the {name!r} backend takes none")
        for field in ("k", "rounds", "episodes_per_bot", "lanes", "max_tokens"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LoopError(f"{field} must be a positive integer, got {value!r}")
        if not 0.0 <= self.temperature <= 2.0:
            raise LoopError(f"temperature must be in [0, 2], got {self.temperature!r}")
        if self.timeout_s <= 0:
            raise LoopError(f"timeout_s must be positive, got {self.timeout_s!r}")
        try:
            scenario_overrides(self.scenario)
            for bot in (*self.bots, self.gif_bot):
                bot_index(bot)
            self.score_config()
        except ValueError as exc:
            raise LoopError(str(exc)) from None

    @property
    def backend_name(self) -> str:
        from jaxarena.llm.backends import parse_llm_spec

        return parse_llm_spec(self.llm)[0]

    def score_config(self) -> ScoreConfig:
        return ScoreConfig(
            episodes_per_bot=self.episodes_per_bot,
            scenario=self.scenario,
            seed=self.seed,
            bots=tuple(self.bots),
            lanes=self.lanes,
        )

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["bots"] = list(self.bots)
        return data

    @classmethod
    def from_json(cls, data: dict) -> LoopConfig:
        return cls(**{**data, "bots": tuple(data["bots"])})


def make_loop_backend(config: LoopConfig):
    """The backend for a run: free generation with `max_tokens` new tokens, seeded."""
    from jaxarena.llm.backends import make_backend, parse_llm_spec

    name, extra = parse_llm_spec(config.llm)
    if name == "ollama":
        options = {
            "num_predict": config.max_tokens,
            "temperature": config.temperature,
            "top_p": 0.95,
            "seed": config.seed,
            # Ollama's default context (2-4 k tokens) would silently cut the coder's prompt (~3 k tokens).
            "num_ctx": 8192,
        }
        return make_backend(
            "ollama",
            model=config.model or DEFAULT_OLLAMA_MODEL,
            host=config.host,
            timeout_s=config.timeout_s,
            options=options,
            decode="free",
        )
    from jaxarena.llm.generate import GGUFGenerator

    kwargs = dict(
        extra,
        decode="free",
        num_predict=config.max_tokens,
        temperature=config.temperature,
        top_p=0.95,
        seed=config.seed,
        max_batch=config.k,
    )
    backend = make_backend(name, **kwargs)
    check_backend(backend)  # before the generator loads the weights
    # The default suffix buckets stop at 512 tokens after the shared system prefix; a coder prompt that
    # carries a plan, a suggestion and the previous program needs more.
    generator = GGUFGenerator(
        gguf_path=backend.gguf_path,
        max_new_tokens=config.max_tokens,
        seed=config.seed,
        batch_buckets=tuple(sorted({1, config.k})),
        suffix_buckets=(128, 256, 512, 1024, 2048),
    )
    return make_backend(name, **kwargs, generator=generator)


def generate(backend, prompts) -> list:
    """Replies for `prompts` from any `Backend`, blocking."""
    if hasattr(backend, "generate_sync"):
        return backend.generate_sync(prompts)
    return asyncio.run(backend.generate(prompts))


def check_backend(backend) -> None:
    """Fails early, with the fix, when the LLM cannot answer (`jaxarena.llm.preflight`)."""
    from jaxarena.llm.preflight import preflight

    preflight(backend)


# --- the run's record ----------------------------------------------------------------------------


class RunLog:
    """`events.jsonl`: append-only, one JSON object per finished step, flushed and synced."""

    def __init__(self, path: Path):
        self.path = path
        self.events: list[dict] = []
        if path.exists():
            raw = path.read_bytes()
            lines = raw.split(b"\n")
            good = 0
            for line in lines:
                if not line.strip():
                    good += len(line) + 1
                    continue
                try:
                    self.events.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line cut off by a kill: it and anything after it is dropped
                good += len(line) + 1
            if good < len(raw):
                with open(path, "r+b") as f:
                    f.truncate(min(good, len(raw)))

    def append(self, event: dict) -> None:
        event.setdefault("time", round(time.time(), 3))  # wall clock, for traces; never read back
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.events.append(event)

    def find(self, kind: str, round_index: int, candidate: int | None = None) -> dict | None:
        for e in self.events:
            if e["event"] == kind and e["round"] == round_index and e.get("candidate") == candidate:
                return e
        return None


def prepare_run_dir(run_dir: Path, config: LoopConfig) -> None:
    """Creates the run folder, or checks that an existing one was started with the same config."""
    path = run_dir / "config.json"
    if path.exists():
        old = json.loads(path.read_text())
        new = config.to_json()
        differ = sorted(k for k in set(old) | set(new) if k not in RESUMABLE and old.get(k) != new.get(k))
        if differ:
            diffs = "; ".join(f"{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in differ)
            raise LoopError(
                f"{run_dir} holds a run with a different config ({diffs}); resume it with the same settings "
                "or choose another --run name"
            )
    elif run_dir.exists() and any(run_dir.iterdir()):
        raise LoopError(f"{run_dir} exists and is not a coder run (no config.json); choose another --run name")
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config.to_json(), indent=2) + "\n")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _round_dir(run_dir: Path, r: int) -> Path:
    return run_dir / f"round_{r:02d}"


def _prompt_json(prompt) -> dict:
    return {"system": prompt.system, "user": prompt.user}


def _prompt_md(prompt: dict, reply: str) -> str:
    return f"# System\n\n{prompt['system']}\n\n# User\n\n{prompt['user']}\n\n# Reply\n\n{reply}\n"


# --- the loop ------------------------------------------------------------------------------------


def update_skills(skills: dict, names: list[str], scores: list[Score]) -> dict:
    """Seed 002's eq. 4 for every skill of the plan and every candidate: the running mean of rollout scores.

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

    def _ask(self, prompts: list) -> list:
        replies = generate(self.backend, prompts)
        failed = [(i, r.error) for i, r in enumerate(replies) if r.error]
        if failed:
            raise LoopError(
                f"the {self.config.backend_name} backend failed on {len(failed)} of {len(prompts)} prompts "
                f"(first: {failed[0][1]}); fix it and rerun the same command to resume"
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
        event = {"event": "plan", "round": r, "prompt": _prompt_json(prompt), "reply": reply}
        event["latency_s"] = round(answer.latency_s, 2)
        event["skills"] = parse_skills(reply)
        self.log.append(event)
        _write(_round_dir(self.run_dir, r) / "plan.md", _prompt_md(event["prompt"], reply))
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
            answers = self._ask(prompts)
            for i, prompt, answer in zip(missing, prompts, answers, strict=True):
                reply = answer.text
                code = extract_code(reply)
                event = {"event": "code", "round": r, "candidate": i, "prompt": _prompt_json(prompt)}
                event.update(reply=reply, code=code, latency_s=round(answer.latency_s, 2))
                self.log.append(event)
                folder = _round_dir(self.run_dir, r)
                _write(folder / f"candidate_{i}.md", _prompt_md(event["prompt"], reply))
                if code is not None:
                    _write(folder / f"candidate_{i}.py", code)
        return [self.log.find("code", r, i) for i in range(1, k + 1)]

    def _score(self, r: int, plan: dict, codes: list[dict]) -> dict:
        done = self.log.find("scored", r)
        if done is not None:
            return done
        sources = [c["code"] for c in codes]
        scores = score_sources(sources, self.score_config, self.cache)
        skills = update_skills(self._skills_before(r), plan["skills"], scores)
        event = {
            "event": "scored",
            "round": r,
            "sources": sources,
            "scores": [s.to_json() for s in scores],
            "skills": skills,
        }
        self.log.append(event)
        folder = _round_dir(self.run_dir, r)
        _write(folder / "scores.json", json.dumps(event["scores"], indent=2) + "\n")
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
        event.update(prompt=_prompt_json(prompt), reply=reply, decision=decision, explicit=said)
        event["latency_s"] = round(answer.latency_s, 2)
        self.log.append(event)
        _write(_round_dir(self.run_dir, r) / "critic.md", _prompt_md(event["prompt"], reply))
        how = "" if said else " (no marker in the reply: improve)"
        self.progress(f"round {r}: critic reviewed candidate {best + 1}: {decision}{how}")
        return event

    # What earlier rounds left.

    def _skills_before(self, r: int) -> dict:
        scored = [e for e in self.log.events if e["event"] == "scored" and e["round"] < r]
        return max(scored, key=lambda e: e["round"])["skills"] if scored else {}

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


def run_name(config: LoopConfig) -> str:
    """The default run folder name: the settings that make a run, so rerunning a command resumes it."""
    model = config.model or (DEFAULT_OLLAMA_MODEL if config.backend_name == "ollama" else "")
    llm = config.llm if config.backend_name != "gguf" else "gguf-" + Path(config.llm.partition(":")[2]).stem
    raw = f"{llm}-{model}-k{config.k}-s{config.seed}-{config.scenario}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-").replace("--", "-")


def load_events(run_dir: str | Path) -> list[dict]:
    """A run's events (for reading a finished or interrupted run)."""
    return RunLog(Path(run_dir) / "events.jsonl").events


def best_candidate(events: list[dict]) -> dict[str, Any] | None:
    """The best scored candidate of a run (the earliest on ties): round, candidate, source and Score."""
    best = None
    for e in sorted((e for e in events if e["event"] == "scored"), key=lambda e: e["round"]):
        for i, (source, score) in enumerate(zip(e["sources"], e["scores"], strict=True), 1):
            if best is None or score["reward"] > best["score"].reward:
                best = {"round": e["round"], "candidate": i, "source": source, "score": Score.from_json(score)}
    return best

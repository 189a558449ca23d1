"""Every claim has a receipt a reader can re-run, and the README's findings say what their receipts say.

- Every receipt in results/ is well formed (`jaxarena.claims.problems`: its fields, numeric figures, intervals that
  hold their figures) and names commits that exist.
- Every link to a receipt in the README and docs/ resolves, and every section of docs/results.md links one.
- Every number in the README's "What we found" bullets is a figure, an interval's end, a count of episodes or a
  reference number of a receipt that bullet links to, as printed (rounded, with its sign), so a README number cannot
  drift from its receipt; a change of any one of them is caught (tested by changing each in turn).
- `jaxarena-claims check` on a small receipt whose command is a python one-liner: a match, a mismatch, a figure the
  output lacks, an unknown name and a malformed receipt. The slow test re-runs a real receipt, a-win-rates.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jaxarena import claims

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS_DOC = ROOT / "docs" / "results.md"
NAMES = claims.names()
#: Receipt links: "(results/NAME.json)" in the README, "(../results/NAME.json)" in docs/.
LINK = re.compile(r"\]\(((?:\.\./)?results/[^)\s#]+)\)")
#: Digits that are names, not figures: a model's, a paper's table, a paper's title.
NAMES_WITH_DIGITS = re.compile(
    r"SmolLM2-135M|Tables? \d+(?:[–-]\d+)?|SMAC-R1|across 0|95% (?:CI|t-interval|confidence)|\]\([^)]*\)"
)
#: A number as the docs print it: a sign (+, − or -, ± for a bound), thousands commas, decimals.
NUMBER = re.compile(r"(?<![\w.])([+−±-]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(e-?\d+)?(?![\w])")
BRACKET = re.compile(r"\[[^\[\]]*\]")
#: A count: a number before "episodes" or "replies" (with words such as "paired" between).
COUNT_AFTER = re.compile(r"\s*(?:(?:paired|fresh|held-out|sampled)\s+)*(?:episodes|replies)\b")
BOTS = ("aggressive", "evasive", "balanced")


def _git() -> bool:
    return shutil.which("git") is not None and (ROOT / ".git").exists()


# --- the receipts ------------------------------------------------------------------------------


def test_there_are_receipts():
    assert len(NAMES) >= 7, f"results/ holds {NAMES}"


@pytest.mark.parametrize("name", NAMES)
def test_a_receipt_is_well_formed(name):
    receipt = claims.load(name)  # raises ReceiptError with every problem
    if not _git():
        pytest.skip("no git here to look the commits up")
    named = [receipt["commit"], *(c for c in (receipt.get("figure_commits") or {}).values() if c != claims.PENDING)]
    for commit in named:
        found = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
        assert found.returncode == 0, f"{name}: commit {commit} is not in this repository"


def test_receipts_speak_of_the_project():
    """A receipt is user-facing text: no development record's words (test_docs.INTERNAL) in its strings."""
    from test_docs import INTERNAL  # tests/ is on the path of the test run

    hits = [
        f"results/{name}.json: {m.group()}" for name in NAMES for m in INTERNAL.finditer(json.dumps(claims.load(name)))
    ]
    assert not hits, "say these in the project's words:\n" + "\n".join(hits)


def test_receipt_links_resolve():
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    links = [(page, target) for page in pages for target in LINK.findall(page.read_text(encoding="utf-8"))]
    assert links, "no page links a receipt"
    missing = [f"{p.relative_to(ROOT)}: {t}" for p, t in links if not (p.parent / t).resolve().is_file()]
    assert not missing, "links to receipts that do not exist:\n" + "\n".join(missing)


def test_every_results_section_links_a_receipt():
    sections = re.split(r"^## ", RESULTS_DOC.read_text(encoding="utf-8"), flags=re.M)[1:]
    # The default recipe's section is rewritten with its own receipt; the rest must each link one.
    unlinked = [s.splitlines()[0] for s in sections if not s.startswith("The default recipe") and not LINK.search(s)]
    assert not unlinked, "sections of docs/results.md with no 'Receipt: [results/NAME.json](...)' line:\n" + "\n".join(
        unlinked
    )


# --- the README's findings against their receipts ---------------------------------------------


def findings(text: str) -> list[str]:
    """The bullets of the README's "What we found", each as one string."""
    section = text.split("## What we found", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.split(r"^- ", section, flags=re.M)[1:]]


def blank(text: str) -> str:
    """`text` with the digits that are names blanked out (the same length, so spans still point into `text`)."""
    return NAMES_WITH_DIGITS.sub(lambda m: " " * len(m.group()), text)


def printed_as(sign: str, number: str, value: float) -> bool:
    """Whether `value` prints as `sign``number`: rounded to the number's decimals; the sign, where one is printed."""
    mantissa, _, exponent = number.replace(",", "").partition("e")
    places = len(mantissa.partition(".")[2]) - int(exponent or 0)  # 1e-4 is printed to 4 places
    shown = float(number.replace(",", "")) * (-1 if sign in ("-", "−") else 1)
    if sign in ("", "±"):
        value, shown = abs(value), abs(shown)
    return abs(value - shown) <= 0.5 * 10**-places + 1e-12


def read_bullet(bullet: str) -> tuple[list[dict], list[tuple[int, int]]]:
    """Every number of `bullet` as {sign, number, start, end, kind}, and the spans of its brackets.

    kind: "ci" inside brackets (an interval), "n" before "episodes" or "replies" (a count), else "figure"."""
    text = blank(bullet)
    brackets = [m.span() for m in BRACKET.finditer(text)]
    tokens = []
    for m in NUMBER.finditer(text):
        inside = any(lo < m.start() < hi for lo, hi in brackets)
        kind = "ci" if inside else "n" if COUNT_AFTER.match(text, m.end()) else "figure"
        number = m.group(2) + (m.group(3) or "") + (m.group(4) or "")
        tokens.append({"sign": m.group(1), "number": number, "start": m.start(), "end": m.end(), "kind": kind})
    return tokens, brackets


def bot_templates(named: dict[str, float]) -> dict[str, dict[str, float]]:
    """{name with its bot as "{bot}": {bot: value}} of the figures (or reference numbers) named per bot."""
    templates: dict[str, dict[str, float]] = {}
    for name, value in named.items():
        for bot in BOTS:
            if bot in name:
                templates.setdefault(name.replace(bot, "{bot}"), {})[bot] = value
    return templates


def per_bot_run(run: list[dict], templates: dict) -> bool:
    """Whether a run "a / b / c" (or "a / b") is one template's values for bots in their order."""
    for values in templates.values():
        for chosen in itertools.combinations([b for b in BOTS if b in values], len(run)):
            if all(printed_as(t["sign"], t["number"], values[b]) for t, b in zip(run, chosen, strict=True)):
                return True
    return False


def runs_of(tokens: list[dict], text: str) -> list[list[dict]]:
    """The figures of a bullet in runs: numbers with only "/" between them (and their intervals) form one run."""
    runs: list[list[dict]] = []
    for t in (t for t in tokens if t["kind"] == "figure"):
        if runs and re.fullmatch(r"[\s%]*/\s*", BRACKET.sub("", text[runs[-1][-1]["end"] : t["start"]])):
            runs[-1].append(t)
        else:
            runs.append([t])
    return runs


def interval_problems(tokens: list[dict], brackets: list, text: str, figures: dict, cis: dict) -> list[str]:
    """Each "[lo, hi]" that is no figure's interval, or not the interval of the figure printed just before it."""
    found = []
    for lo, hi in brackets:
        ends = [t for t in tokens if lo < t["start"] < hi]
        before = [t for t in tokens if t["kind"] == "figure" and t["end"] <= lo and not text[t["end"] : lo].strip()]
        if len(ends) == 2 and not any(
            all(printed_as(e["sign"], e["number"], x) for e, x in zip(ends, ci, strict=True))
            and all(printed_as(b["sign"], b["number"], figures[k]) for b in before)
            for k, ci in cis.items()
        ):
            found.append(f"{text[lo:hi]} (no figure has this interval" + (" and value)" if before else ")"))
    return found


def bullet_problems(bullet: str, receipts: list[dict]) -> list[str]:
    """The numbers of one bullet that its receipts do not state, each as printed."""
    figures = {k: v for r in receipts for k, v in r["figures"].items()}
    named = figures | {k: v for r in receipts for k, v in (r.get("reference") or {}).items()}
    cis = {k: ci for r in receipts for k, ci in r["ci95"].items()}
    counts = [c for r in receipts for c in (r["n"].values() if isinstance(r["n"], dict) else [r["n"]])]
    tokens, brackets = read_bullet(bullet)
    text = blank(bullet)
    found = [
        f"{t['number']} (a count no linked receipt's n is)"
        for t in tokens
        if t["kind"] == "n" and not any(printed_as("", t["number"], c) for c in counts)
    ]
    found += interval_problems(tokens, brackets, text, figures, cis)
    templates = bot_templates(named)
    for run in runs_of(tokens, text):
        if len(run) in (2, 3) and not per_bot_run(run, templates):
            found.append(" / ".join(t["sign"] + t["number"] for t in run) + " (no figure per bot)")
        elif len(run) not in (2, 3):
            lone = [t for t in run if not any(printed_as(t["sign"], t["number"], v) for v in named.values())]
            found += [t["sign"] + t["number"] for t in lone]
    return found


def drift(readme: str) -> list[str]:
    """The README findings' numbers that the receipts their bullet links to do not state, as "bullet N: number".

    A figure is read in place: a run "a / b / c" is one figure's values against the three bots in order (or two of
    them), an interval "[lo, hi]" is the interval of the figure printed just before it, and a count of episodes or
    replies is the n of a linked receipt; any other number is a figure or a reference number of a linked receipt."""
    found = []
    for i, bullet in enumerate(findings(readme), 1):
        linked = [claims.load(Path(t).stem) for t in LINK.findall(bullet)]
        problems = bullet_problems(bullet, linked) if linked else ["links no receipt"]
        found += [f"bullet {i}: {problem}" for problem in problems]
    return found


def test_the_readme_findings_are_their_receipts_figures():
    missing = drift(README.read_text(encoding="utf-8"))
    assert not missing, "README numbers that their linked receipts do not state:\n" + "\n".join(missing)


def test_changing_any_readme_finding_number_is_caught():
    """Each number of the findings, its last digit changed to a value its bullet's receipts do not hold, is caught."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## What we found", 1)[1].split("\n## ", 1)[0]
    start = text.index(section)
    bullets = findings(text)
    held = [[v for t in LINK.findall(b) for v in receipt_values(claims.load(Path(t).stem))] for b in bullets]
    matches = list(NUMBER.finditer(blank(section)))
    assert len(matches) > 30, "the findings hold fewer numbers than expected: is the section there?"
    uncaught = []
    for m in matches:
        hi = m.end(3) if m.group(3) else m.end(2)
        bullet = section[: m.start()].count("\n- ") - 1 + section.startswith("- ")
        for delta in range(1, 10):
            changed = section[: hi - 1] + str((int(section[hi - 1]) + delta) % 10) + section[hi:]
            new = NUMBER.match(blank(changed), m.start())
            sign, number = new.group(1), new.group(2) + (new.group(3) or "")
            if not any(printed_as(sign, number, v) for v in held[bullet]):
                break
        else:
            continue  # every change of that digit is some value of the receipts: nothing to catch
        if not drift(text[:start] + changed + text[start + len(section) :]):
            uncaught.append(changed[max(0, m.start() - 20) : m.end() + 5].replace("\n", " "))
    assert not uncaught, "changing these README numbers went unnoticed:\n" + "\n".join(uncaught)


def receipt_values(receipt: dict) -> list[float]:
    """Every number a receipt states: figures, interval ends, counts and reference numbers."""
    n = receipt["n"]
    values = [*receipt["figures"].values(), *(x for ci in receipt["ci95"].values() for x in ci)]
    values += [*(n.values() if isinstance(n, dict) else [n]), *(receipt.get("reference") or {}).values()]
    return [float(v) for v in values]


def test_a_changed_number_is_named():
    text = README.read_text(encoding="utf-8").replace("+29 [+20, +39]", "+31 [+20, +39]", 1)
    assert drift(text) == ["bullet 2: [+20, +39] (no figure has this interval and value)", "bullet 2: +31"]


# --- jaxarena-claims check, on a receipt of a python one-liner ---------------------------------


def receipt(tmp_path: Path, value: float, **changes) -> Path:
    """results/toy.json under `tmp_path`: one command writing {"x": {"rate": 0.25}} to {out}/toy.json."""
    here = claims.here()
    write = "import json, sys; json.dump({'x': {'rate': 0.25}}, open(sys.argv[1], 'w'))"
    body = {
        "name": "toy",
        "claim": "A one-liner writes a rate of 25%.",
        "command": f'{sys.executable} -c "{write}"' + " {out}/toy.json",
        "commit": "0" * 40,
        "platform": here,
        "figures": {"rate_pct": value},
        "ci95": {"rate_pct": [value - 5, value + 5]},
        "n": 100,
        "keys": {"seed": 0},
        "output": {"file": "toy.json", "figures": {"rate_pct": {"path": ["x", "rate"], "scale": 100, "digits": 1}}},
        "tolerance": {"same_platform": 0, "other_platform": 1.0},
    } | changes
    root = tmp_path / "results"
    root.mkdir(exist_ok=True)
    (root / "toy.json").write_text(json.dumps(body))
    return root


class Done:
    """What `jaxarena-claims` did: its exit status and what it printed (its commands' output too)."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def run_claims(capfd):
    """`run_claims(root, *args)`: `jaxarena-claims --receipts ROOT ARGS...`, in this process."""

    def run(root: Path, *args: str) -> Done:
        capfd.readouterr()
        try:
            code = claims.main(["--receipts", str(root), *args])
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
        out, err = capfd.readouterr()
        return Done(code, out, err)

    return run


def test_check_reports_a_match(tmp_path, run_claims):
    done = run_claims(receipt(tmp_path, 25.0), "check", "toy", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"rate_pct\s+25\s+25\s+match", done.stdout)
    assert "exact replay" in done.stdout
    assert json.loads((tmp_path / "out" / "toy.json").read_text()) == {"x": {"rate": 0.25}}


def test_check_reports_a_mismatch(tmp_path, run_claims):
    done = run_claims(receipt(tmp_path, 25.5), "check", "toy")
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"rate_pct\s+25.5\s+25\s+MISMATCH", done.stdout)


def test_off_its_platform_a_receipt_allows_its_tolerance(tmp_path, run_claims):
    elsewhere = dict(claims.here(), jax="0.0.1")
    done = run_claims(receipt(tmp_path, 25.5, platform=elsewhere), "check", "toy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "within the receipt's tolerance" in done.stdout
    done = run_claims(receipt(tmp_path, 27.0, platform=elsewhere), "check", "toy")
    assert done.returncode == 1, done.stdout + done.stderr


def test_a_figure_the_output_lacks_is_an_error(tmp_path, run_claims):
    output = {"file": "toy.json", "figures": {"rate_pct": {"path": ["x", "share"], "scale": 100}}}
    done = run_claims(receipt(tmp_path, 25.0, output=output), "check", "toy")
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.search(r"rate_pct\s+25\s+-\s+MISSING", done.stdout)
    assert "lacks rate_pct" in done.stderr


def test_a_failing_command_is_an_error(tmp_path, run_claims):
    failing = f"{sys.executable} -c 'raise SystemExit(3)' {{out}}"
    done = run_claims(receipt(tmp_path, 25.0, command=failing), "check", "toy")
    assert done.returncode == 2 and "exited with status 3" in done.stderr, done.stderr


def test_an_unknown_name_lists_the_receipts(tmp_path, run_claims):
    done = run_claims(receipt(tmp_path, 25.0), "show", "nothing")
    assert done.returncode == 2
    assert done.stderr.strip() == "jaxarena-claims: error: no receipt 'nothing'; receipts: toy"


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"figures": {"rate_pct": "25"}}, "figure rate_pct is not a number"),
        ({"ci95": {"rate_pct": [30, 40]}}, "ci95 of rate_pct is not a [lo, hi] that holds the figure"),
        ({"tolerance": {"same_platform": 1, "other_platform": 1}}, "tolerance is not"),
        ({"commit": "HEAD"}, "is no commit hash"),
        ({"command": "true"}, "no command writes to {out}"),
        ({"n": 0}, "n is not a positive integer"),
    ],
)
def test_a_malformed_receipt_is_one_line(tmp_path, run_claims, change, problem):
    done = run_claims(receipt(tmp_path, 25.0, **change), "check", "toy")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and problem in done.stderr, done.stderr


def test_a_receipt_without_a_field_is_malformed(tmp_path, run_claims):
    root = receipt(tmp_path, 25.0)
    body = json.loads((root / "toy.json").read_text())
    del body["keys"]
    (root / "toy.json").write_text(json.dumps(body))
    done = run_claims(root, "show", "toy")
    assert done.returncode == 2 and "missing keys" in done.stderr, done.stderr


def test_list_and_show(tmp_path, run_claims):
    root = receipt(tmp_path, 25.0)
    listed = run_claims(root, "list")
    assert listed.returncode == 0 and listed.stdout.split() == ["toy", *"A one-liner writes a rate of 25%.".split()]
    shown = run_claims(root, "show", "toy")
    assert shown.returncode == 0 and "rate_pct" in shown.stdout and "[20, 30], n 100" in shown.stdout


@pytest.mark.slow
def test_a_real_receipt_replays(tmp_path):
    """a-win-rates: A and A-raid, 500 episodes per bot each (about a CPU-minute; 2-3 min on 2 idle cores)."""
    done = subprocess.run(
        [sys.executable, "-m", "jaxarena.claims", "check", "a-win-rates", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count(" match") == 6

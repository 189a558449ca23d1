"""`jaxarena-claims`: every claim of the README and docs/results.md, with a receipt a reader can re-run.

    jaxarena-claims list                          # every receipt: its name and its claim
    jaxarena-claims show a-win-rates              # one receipt: figures, command, commit, platform, keys
    jaxarena-claims check a-win-rates             # re-run its command and compare every figure
    jaxarena-claims check a-win-rates --out runs/claims/a-win-rates

A receipt is one JSON file, `results/NAME.json`, with the fields of `REQUIRED`: the claim in one
sentence, the shell command(s) that reproduce it (`{out}` stands for the folder they write to), the
commit at which its figures were measured (`figure_commits` names another, or "pending", for a
figure measured apart), the platform they were measured on ({"jax": version, "device": "cpu" or
"gpu", "cores": n}), the figures by name, their 95% intervals where the docs give them, the episodes
or replies behind them (`n`), the keys they were measured on, where the re-run writes each figure
(`output`) and the tolerance off the receipt's platform. Numbers a claim cites but does not measure
(the paper's figures, a preset's settings, wall times) sit in the optional `reference`, which
`check` leaves alone.

`output` is {"file": a default file, "figures": {name: {"path", "file", "divide_by", "scale", "digits"}}}:
each figure is read from its file (relative to `{out}`; JSON, or JSON lines read as a list) at its path of
keys and list indices (`{out}` in a key stands for the folder, where a command names a run by its path),
divided by the number at `divide_by` (a path in the same file) where the figure is a share, multiplied by
`scale` (default 1) and rounded to `digits` places (none if absent), as the docs print it. `n` is one
count, or one per figure beside a "default".

`check` runs the commands in the repository's root and compares: exactly where the platform is the
receipt's (the same jax version, device and number of cores), within `tolerance["other_platform"]` (one
number, or one per figure beside a "default") elsewhere. Its exit status is 0 when every figure matches,
1 when one does not, 2 on an error: an unknown name, a malformed receipt, a command that fails, or a
figure its output lacks.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from .cli_errors import ArgumentParser, UserError, cli_main

#: The receipts that ship: the repository's results/ (its run folders, results/*/, are jaxarena-evaluate's).
RECEIPTS = Path(__file__).resolve().parents[1] / "results"
REQUIRED = ("name", "claim", "command", "commit", "platform", "figures", "ci95", "n", "keys", "output", "tolerance")
PLATFORM_FIELDS = ("jax", "device", "cores")
DEVICES = ("cpu", "gpu")
PENDING = "pending"
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


class ReceiptError(UserError):
    """A receipt that is missing or malformed, or a re-run that did not produce what it says."""


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def commands(receipt: dict) -> list[str]:
    """The receipt's command(s) as a list."""
    command = receipt["command"]
    return [command] if isinstance(command, str) else list(command)


def problems(receipt: dict) -> list[str]:
    """What is wrong with a receipt, one phrase each; empty if it is well formed."""
    missing = [f for f in REQUIRED if f not in receipt]
    if missing:
        return [f"missing {', '.join(missing)}"]
    found = []
    figures = receipt["figures"]
    if not isinstance(figures, dict) or not figures:
        return ["figures is not a non-empty object of named numbers"]
    found += [f"figure {k} is not a number" for k, v in figures.items() if not _number(v)]
    for k, v in (receipt.get("reference") or {}).items():
        if not _number(v):
            found.append(f"reference {k} is not a number")
    for k, ci in receipt["ci95"].items():
        if k not in figures:
            found.append(f"ci95 names {k}, which is no figure")
        elif _number(figures[k]) and not (
            isinstance(ci, list) and len(ci) == 2 and all(map(_number, ci)) and ci[0] <= figures[k] <= ci[1]
        ):
            found.append(f"ci95 of {k} is not a [lo, hi] that holds the figure {figures[k]}")
    n = receipt["n"]
    counts = n.values() if isinstance(n, dict) else [n]
    if not all(isinstance(c, int) and c > 0 for c in counts):
        found.append("n is not a positive integer (or one per figure)")
    found += _platform_problems(receipt["platform"])
    found += _commit_problems(receipt)
    found += _output_problems(receipt)
    found += _tolerance_problems(receipt["tolerance"], figures)
    if not all(isinstance(c, str) and c.strip() for c in commands(receipt)):
        found.append("command is not a shell command or a list of them")
    elif not any("{out}" in c for c in commands(receipt)):
        found.append("no command writes to {out}")
    if not isinstance(receipt["keys"], dict) or not receipt["keys"]:
        found.append("keys does not say which keys the figures were measured on")
    return found


def _platform_problems(platform) -> list[str]:
    if not isinstance(platform, dict) or set(platform) != set(PLATFORM_FIELDS):
        return [f"platform is not {{{', '.join(PLATFORM_FIELDS)}}}"]
    if platform["device"] not in DEVICES or not isinstance(platform["cores"], int):
        return [f"platform's device is not one of {', '.join(DEVICES)} or its cores not a count"]
    return []


def _commit_problems(receipt: dict) -> list[str]:
    found = [] if _COMMIT.fullmatch(str(receipt["commit"])) else [f"commit {receipt['commit']!r} is no commit hash"]
    for k, c in (receipt.get("figure_commits") or {}).items():
        if k not in receipt["figures"]:
            found.append(f"figure_commits names {k}, which is no figure")
        elif c != PENDING and not _COMMIT.fullmatch(str(c)):
            found.append(f"figure_commits of {k} is neither a commit hash nor {PENDING!r}")
    return found


def _output_problems(receipt: dict) -> list[str]:
    output = receipt["output"]
    specs = output.get("figures") if isinstance(output, dict) else None
    if not isinstance(specs, dict):
        return ["output has no figures"]
    found = [f"output does not say where to read {k}" for k in receipt["figures"] if k not in specs]
    for k, spec in specs.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("path"), list):
            found.append(f"output of {k} has no path")
        elif not (spec.get("file") or output.get("file")):
            found.append(f"output of {k} names no file")
    return found


def _tolerance_problems(tolerance, figures: dict) -> list[str]:
    if not isinstance(tolerance, dict) or tolerance.get("same_platform") != 0 or "other_platform" not in tolerance:
        return ['tolerance is not {"same_platform": 0, "other_platform": ...}']
    other = tolerance["other_platform"]
    values = [other] if not isinstance(other, dict) else [other.get(k, other.get("default")) for k in figures]
    if not all(_number(v) and v >= 0 for v in values):
        return ["tolerance's other_platform is not a number >= 0 for every figure"]
    return []


def names(root: Path = RECEIPTS) -> list[str]:
    """The receipts in `root`, by name."""
    return sorted(p.stem for p in Path(root).glob("*.json"))


def load(name: str, root: Path = RECEIPTS) -> dict:
    """The receipt called `name`, checked; ReceiptError if there is none or it is malformed."""
    path = Path(root) / f"{name}.json"
    if not path.is_file():
        raise ReceiptError(f"no receipt {name!r}; receipts: {', '.join(names(root)) or 'none'}")
    try:
        receipt = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ReceiptError(f"{path}: not JSON ({exc})") from None
    found = problems(receipt) if isinstance(receipt, dict) else ["not a JSON object"]
    if not found and receipt["name"] != name:
        found = [f"its name is {receipt['name']!r}, not the file's {name!r}"]
    if found:
        raise ReceiptError(f"{path}: a malformed receipt: {'; '.join(found)}")
    return receipt


def here() -> dict:
    """The platform this process runs on, as a receipt records one."""
    from importlib.metadata import version

    import jax

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"jax": version("jax"), "device": "cpu" if jax.default_backend() == "cpu" else "gpu", "cores": cores}


def tolerance_of(receipt: dict, figure: str, exact: bool) -> float:
    """How far a re-measured figure may lie from the receipt's: 0 on its platform, else its stated tolerance."""
    if exact:
        return 0.0
    other = receipt["tolerance"]["other_platform"]
    return float(other.get(figure, other.get("default")) if isinstance(other, dict) else other)


def _read(path: Path):
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def _at(data, path: list, out: Path) -> float:
    """The number at `path` (keys and list indices) in `data`; `{out}` in a key is the output folder."""
    for step in path:
        step = step.replace("{out}", str(out)) if isinstance(step, str) else step  # a key that names a path
        data = data[int(step)] if isinstance(data, list) else data[step]
    if not _number(data):
        raise TypeError(f"{data!r} is not a number")
    return data


def measured(receipt: dict, out: Path) -> dict[str, float | None]:
    """Each figure as the re-run's output holds it, scaled and rounded; None where the output lacks it."""
    files: dict[Path, object] = {}
    found = {}
    for name in receipt["figures"]:
        spec = receipt["output"]["figures"][name]
        path = Path(out) / (spec.get("file") or receipt["output"]["file"])
        try:
            data = files[path] if path in files else files.setdefault(path, _read(path))
            value = _at(data, spec["path"], out)
            if spec.get("divide_by") is not None:
                value = value / _at(data, spec["divide_by"], out)
        except (OSError, ValueError, KeyError, IndexError, TypeError, ZeroDivisionError):
            found[name] = None
            continue
        value = value * spec.get("scale", 1)
        found[name] = round(value, spec["digits"]) if spec.get("digits") is not None else value
    return found


def compare(receipt: dict, values: dict[str, float | None], exact: bool) -> list[tuple[str, float, object, str]]:
    """(figure, receipt's value, re-measured value, "match" / "MISMATCH" / "MISSING") for every figure."""
    rows = []
    for name, expected in receipt["figures"].items():
        got = values.get(name)
        if got is None:
            rows.append((name, expected, "-", "MISSING"))
        else:
            ok = abs(got - expected) <= tolerance_of(receipt, name, exact)
            rows.append((name, expected, got, "match" if ok else "MISMATCH"))
    return rows


def rerun(receipt: dict, out: Path, cwd: Path) -> None:
    """Runs the receipt's commands in `cwd`, `{out}` replaced by `out`; ReceiptError if one fails.

    This interpreter's folder leads PATH, so `python` and the console scripts are the ones it runs with."""
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    for command in commands(receipt):
        line = command.replace("{out}", shlex.quote(str(out)))
        print(f"$ {line}", flush=True)
        done = subprocess.run(line, shell=True, cwd=cwd, env=env)
        if done.returncode != 0:
            raise ReceiptError(f"{receipt['name']}: the command exited with status {done.returncode}: {line}")


def _show(receipt: dict) -> str:
    lines = [f"{receipt['name']}: {receipt['claim']}", ""]
    lines += [f"  $ {c}" for c in commands(receipt)]
    p = receipt["platform"]
    lines += ["", f"commit:    {receipt['commit']}", f"platform:  jax {p['jax']}, {p['device']}, {p['cores']} cores"]
    lines.append(f"keys:      {json.dumps(receipt['keys'], ensure_ascii=False)}")
    n, commits = receipt["n"], receipt.get("figure_commits") or {}
    width = max(len(name) for name in [*receipt["figures"], *(receipt.get("reference") or {})])
    lines.append("figures:")
    for name, value in receipt["figures"].items():
        ci = receipt["ci95"].get(name)
        extra = [f"[{ci[0]:g}, {ci[1]:g}]"] if ci else []
        extra.append(f"n {n.get(name, n.get('default')) if isinstance(n, dict) else n}")
        extra += [f"commit {commits[name]}"] if name in commits else []
        lines.append(f"  {name:<{width}} {value:>10g}  " + ", ".join(extra))
    for name, value in (receipt.get("reference") or {}).items():
        lines.append(f"  {name:<{width}} {value:>10g}  (reference, not re-measured)")
    lines.append(f"tolerance: {json.dumps(receipt['tolerance'], ensure_ascii=False)}")
    return "\n".join(lines)


def check(receipt: dict, out: Path, cwd: Path, platform: dict) -> int:
    """Re-runs the receipt into `out`, prints each figure beside the receipt's; 0 if all match, 1 if not."""
    out.mkdir(parents=True, exist_ok=True)
    rerun(receipt, out, cwd)
    exact = all(receipt["platform"][k] == platform[k] for k in PLATFORM_FIELDS)
    mine = receipt["platform"]
    print(
        f"\nreceipt's platform: jax {mine['jax']}, {mine['device']}, {mine['cores']} cores; "
        f"here: jax {platform['jax']}, {platform['device']}, {platform['cores']} cores -> "
        + ("exact replay" if exact else "within the receipt's tolerance")
    )
    rows = compare(receipt, measured(receipt, out), exact)
    width = max(len(name) for name, *_ in rows)
    print(f"{'figure':<{width}} {'receipt':>10} {'re-measured':>12}")
    for name, expected, got, status in rows:
        print(f"{name:<{width}} {expected:>10g} {got if isinstance(got, str) else format(got, 'g'):>12}  {status}")
    missing = [name for name, *_, status in rows if status == "MISSING"]
    if missing:
        raise ReceiptError(f"{receipt['name']}: the output in {out} lacks {', '.join(missing)}")
    return 0 if all(status == "match" for *_, status in rows) else 1


@cli_main("jaxarena-claims")
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="jaxarena-claims", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--receipts", default=str(RECEIPTS), help="the folder of receipts (default: the repository's results/)"
    )
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub.add_parser("list", help="every receipt's name and claim")
    show = sub.add_parser("show", help="one receipt: its figures, command, commit, platform and keys")
    show.add_argument("name", help="the receipt's name (jaxarena-claims list)")
    run = sub.add_parser("check", help="re-run a receipt's command and compare every figure with the receipt")
    run.add_argument("name", help="the receipt's name (jaxarena-claims list)")
    run.add_argument(
        "--out", default=None, help="the folder the command writes to, its {out} (default: a new temporary one)"
    )
    args = p.parse_args(argv)
    root = Path(args.receipts)
    if args.action == "list":
        for name in names(root):
            print(f"{name:<24} {load(name, root)['claim']}")
        return 0
    receipt = load(args.name, root)
    if args.action == "show":
        print(_show(receipt))
        return 0
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix=f"claim-{args.name}-"))
    return check(receipt, out.resolve(), root.resolve().parent, here())


if __name__ == "__main__":
    sys.exit(main())

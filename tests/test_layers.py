"""The layer rule: a module imports only from its own layer and those below it, and no modules import
each other in a cycle.

The layers, bottom to top, are `LAYERS`; docs/layout.md ("Layers") says why each sits where it does,
and `test_the_docs_list_the_layers_in_this_order` keeps the two the same. Every import statement
counts: at the top of a module or inside a function, relative or absolute, under `if TYPE_CHECKING`
too. `import jaxarena` and `from jaxarena import x` import the package's `__init__` (and `x`, where
it is a module); the packages a dotted import passes through are not counted, since every module
imports its parents.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: pyproject.toml's package-dir: each installed package's folder in the checkout.
PACKAGE_DIRS = {
    "jaxarena": "jaxarena",
    "jaxarena.algorithms": "algorithms",
    "jaxarena.llm": "llm",
    "jaxarena.protocol": "protocol",
    "jaxarena.coder": "coder",
    "jaxarena.selector": "selector",
}
#: Bottom to top: (layer, the modules and packages in it). A module is in the layer of the longest
#: entry it starts with, so a module may be placed apart from its folder.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("jaxarena",)),
    ("algorithms", ("jaxarena.algorithms", "jaxarena.bot_arena")),
    ("llm", ("jaxarena.llm",)),
    ("coder, selector", ("jaxarena.coder", "jaxarena.selector")),
    ("zoo", ("jaxarena.zoo", "jaxarena.zoo_cards", "jaxarena.zoo_cli")),
    ("protocol", ("jaxarena.protocol",)),
    ("tuning", ("jaxarena.llm.tuning", "jaxarena.coder.tuning")),
)
LAYOUT_DOC = ROOT / "docs" / "layout.md"


def package_modules(root: Path, package_dirs: dict[str, str]) -> dict[str, Path]:
    """{dotted name: file} of every module of the packages (a folder without `__init__.py` is data)."""
    modules = {}
    for package, folder in package_dirs.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            if not all((base.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(len(parts))):
                continue
            name = ".".join((package, *parts))
            modules[name.removesuffix(".__init__")] = path
    return modules


def layer_of(module: str, layers=LAYERS) -> int:
    """The index in `layers` of the longest entry `module` is or lies under."""
    best, length = None, -1
    for index, (_, entries) in enumerate(layers):
        for entry in entries:
            if (module == entry or module.startswith(entry + ".")) and len(entry) > length:
                best, length = index, len(entry)
    if best is None:
        raise ValueError(f"{module} is in no layer")
    return best


def _known(name: str, modules: Iterable[str]) -> str | None:
    """`name`, or the longest of its prefixes that is a module (`a.b.attr` -> `a.b`); None if none is."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement of `module` that names one of `modules`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [_known(alias.name, modules) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                parts = package.split(".")
                source = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            # `from p import x` runs p (a package's __init__) and, where x is a module, x.
            targets = [_known(source, modules)] + [f"{source}.{a.name}" for a in node.names]
        else:
            continue
        found.update((node.lineno, t) for t in targets if t in modules and t != module)
    return sorted(found)


def import_graph(modules: dict[str, Path]) -> dict[str, list[tuple[int, str]]]:
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def upward_imports(graph: dict[str, list[tuple[int, str]]], layers=LAYERS) -> list[str]:
    """`module:line -> target` for every import of a higher layer's module."""
    return [
        f"{module}:{line} -> {target}"
        for module, edges in sorted(graph.items())
        for line, target in edges
        if layer_of(target, layers) > layer_of(module, layers)
    ]


def _components(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted({t for _, t in graph[start]})))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted({t for _, t in graph.get(succ, [])}))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _one_cycle(graph: dict[str, list[tuple[int, str]]], component: list[str]) -> str:
    """A shortest cycle through the component's first module, each step as `module:line`."""
    inside, start = set(component), component[0]
    came_from: dict[str, tuple[str, int]] = {}
    frontier = [start]
    while frontier and start not in came_from:
        following = []
        for node in frontier:
            for line, target in graph[node]:
                if target in inside and target not in came_from:
                    came_from[target] = (node, line)
                    following.append(target)
        frontier = following
    steps, node = [], start
    while True:
        node, line = came_from[node]
        steps.append(f"{node}:{line}")
        if node == start:
            break
    return " -> ".join([*reversed(steps), start])


def import_cycles(graph: dict[str, list[tuple[int, str]]]) -> list[str]:
    """Each cycle of imports: its modules, and one path around it."""
    return [f"{{{', '.join(c)}}}: {_one_cycle(graph, c)}" for c in _components(graph)]


def _graph() -> dict[str, list[tuple[int, str]]]:
    return import_graph(package_modules(ROOT, PACKAGE_DIRS))


def test_the_packages_hold_modules():
    modules = package_modules(ROOT, PACKAGE_DIRS)
    for package in PACKAGE_DIRS:
        assert package in modules and any(m.startswith(package + ".") for m in modules), package


def test_every_layer_entry_names_a_module_or_package():
    modules = package_modules(ROOT, PACKAGE_DIRS)
    stale = [entry for _, entries in LAYERS for entry in entries if entry not in modules]
    assert not stale, f"LAYERS names what is no longer there: {stale}"


def test_no_module_imports_a_higher_layer():
    found = upward_imports(_graph())
    names = " < ".join(name for name, _ in LAYERS)
    assert not found, f"imports of a higher layer ({names}); move the code down or the import up:\n" + "\n".join(found)


def test_no_modules_import_each_other_in_a_cycle():
    found = import_cycles(_graph())
    assert not found, "modules that import each other in a cycle:\n" + "\n".join(found)


def test_the_docs_list_the_layers_in_this_order():
    """docs/layout.md's "Layers" list: one item per layer, bottom first, naming each of its entries."""
    section = LAYOUT_DOC.read_text(encoding="utf-8").split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^\d+\. \*\*(.+?)\*\*(.*)$", section, re.M)
    assert [name for name, _ in items] == [name for name, _ in LAYERS]
    for (name, entries), (_, text) in zip(LAYERS, items, strict=True):
        for entry in entries:
            assert f"`{entry}`" in text, f"docs/layout.md's {name!r} layer does not name `{entry}`"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_names_an_upward_import_and_a_cycle(tmp_path):
    """A tiny package with one import of a higher layer and one cycle: both are found, by line."""
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "def f():\n    import pkg.top.g\n",
            "pkg/a.py": "from . import b\n",
            "pkg/b.py": "import pkg.a\n",
            "pkg/data/notes.py": "import pkg.top\n",  # no __init__.py: data, not a module
            "top/__init__.py": "",
            "top/g.py": "from pkg import a\n",
        },
    )
    layers = (("bottom", ("pkg",)), ("top", ("pkg.top",)))
    graph = import_graph(package_modules(tmp_path, {"pkg": "pkg", "pkg.top": "top"}))
    assert set(graph) == {"pkg", "pkg.low", "pkg.a", "pkg.b", "pkg.top", "pkg.top.g"}
    assert upward_imports(graph, layers) == ["pkg.low:2 -> pkg.top.g"]
    assert import_cycles(graph) == ["{pkg.a, pkg.b}: pkg.a:1 -> pkg.b:1 -> pkg.a"]


def test_importing_the_package_from_inside_it_counts_as_importing_its_init(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .env import Env\n",
            "pkg/env.py": "def make():\n    from pkg import util\n",
            "pkg/util.py": "",
        },
    )
    graph = import_graph(package_modules(tmp_path, {"pkg": "pkg"}))
    assert graph["pkg.env"] == [(2, "pkg"), (2, "pkg.util")]
    assert import_cycles(graph) == ["{pkg, pkg.env}: pkg:3 -> pkg.env:2 -> pkg"]


def _top_level_names(statements: list[ast.stmt]) -> set[str]:
    """What a module defines itself: its functions, classes and assigned names (also under `if`/`try`)."""
    names = set()
    for node in statements:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.If | ast.Try):
            inner = [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
            inner += [s for handler in getattr(node, "handlers", []) for s in handler.body]
            names |= _top_level_names(inner)
    return names


def borrowed_imports(modules: dict[str, Path], files: Iterable[Path]) -> list[str]:
    """`file:line name from module` for every `from M import name` in `files` where M is a project module,
    not a package, that does not define `name`: a name imported from where it was re-exported."""
    defined = {m: _top_level_names(ast.parse(p.read_text(encoding="utf-8")).body) for m, p in modules.items()}
    owner = {p.resolve(): m for m, p in modules.items()}
    found = []
    for path in files:
        me = owner.get(path.resolve())
        package = (me if path.name == "__init__.py" else me.rpartition(".")[0]) if me else None
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if not isinstance(node, ast.ImportFrom) or (node.level and package is None):
                continue
            source = node.module or ""
            if node.level:
                parts = package.split(".")
                source = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            if source not in modules or modules[source].name == "__init__.py":
                continue  # outside the project, or a package's public API
            for alias in node.names:
                if alias.name not in defined[source] and f"{source}.{alias.name}" not in modules:
                    found.append(f"{path}:{node.lineno} {alias.name} from {source}")
    return found


def test_names_are_imported_from_the_module_that_defines_them():
    modules = package_modules(ROOT, PACKAGE_DIRS)
    folders = [*PACKAGE_DIRS.values(), "tests", "scripts", "studies", "benchmarks", "tools"]
    files = sorted({p for folder in folders for p in (ROOT / folder).rglob("*.py") if "pretrained" not in p.parts})
    found = borrowed_imports(modules, files)
    assert not found, "import these from the module that defines them (only a package's __init__ re-exports):\n" + (
        "\n".join(found)
    )


def test_a_borrowed_import_is_found(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "home.py").write_text("VALUE = 1\n")
    (tmp_path / "pkg" / "hub.py").write_text("from .home import VALUE\n")
    user = tmp_path / "pkg" / "user.py"
    user.write_text("from .hub import VALUE\nfrom .home import VALUE as V\n")
    modules = package_modules(tmp_path, {"pkg": "pkg"})
    found = borrowed_imports(modules, [user, tmp_path / "pkg" / "hub.py"])
    assert [f.split(" ", 1)[1] for f in found] == ["VALUE from pkg.hub"]

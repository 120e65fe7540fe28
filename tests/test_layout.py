"""The package layout is the loop, and the imports say so: a cheap check over the source (ast, no
imports), so a phase reaching into another shows up as a failing test, not in review.

- every package imports only the packages its row of ``MAY_IMPORT`` names (docs/design.md has
  the same table): ``model`` imports nothing of ours, ``decide`` never ``observe``/``act``/
  ``record``, ``act`` never ``decide``, ``cli`` and ``web`` never ``daemon`` or each other;
- ``decide`` does no I/O: no I/O module, no ``open``/``print``, no clock of its own;
- an import inside a function says why it is lazy (``# lazy: reason``);
- a private name (``_x``) is imported only within its own package, and never from one gflowctl
  verb into another (shared helpers live in ``cli/common.py`` or, shared with the Python client, in ``client/``);
- functions in ``decide`` stay short enough to read: 60 lines, the reconcile driver 40.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "controller"

# package -> the packages of ours it may import (itself always; ``controller`` itself, the version)
MAY_IMPORT: dict[str, set[str]] = {
    "model": set(),
    "util": set(),
    "paths": {"util.lean_path"},  # a leaf of no imports of ours: run and apply's homes without pathlib
    "api": {"model", "util"},
    "decide": {"model", "api", "util.yamlio"},
    "observe": {"model", "api", "util", "paths"},
    "act": {"model", "api", "export", "util", "paths"},
    "record": {"model", "api", "util", "paths"},
    "sinks": {"model", "api", "util", "paths"},
    "client": {"model", "api", "util", "paths"},
    "cli": {"client", "model", "api", "decide", "export", "sim", "util", "paths", "mcp"},
    "mcp": {"cli", "client", "model", "api", "util", "paths"},
    "web": {"client", "model", "api", "util", "paths"},
    "export": {"model", "api", "util"},
    "sim": {"model", "api", "decide"},
    "daemon": {"model", "api", "observe", "decide", "act", "record", "sinks", "client", "web", "util", "paths"},
}
# only for annotations (``if TYPE_CHECKING:``): the schema types a model field holds
MAY_IMPORT_FOR_TYPES = {"model": {"api"}}
# decide is pure: it reads no file, clock, process, user database or network
IO_MODULES = {
    "os",
    "sys",
    "io",
    "time",
    "pwd",
    "grp",
    "subprocess",
    "socket",
    "shutil",
    "pathlib",
    "tempfile",
    "fcntl",
    "select",
    "selectors",
    "threading",
    "multiprocessing",
    "urllib",
    "http",
    "logging",
    "glob",
}
IO_CALLS = {"open", "print", "input"}
CLOCK_CALLS = {"now", "today", "utcnow", "time", "monotonic", "perf_counter", "localtime"}
MAX_DECIDE_LINES = 60
MAX_DRIVER_LINES = 40


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    module: str  # absolute, e.g. controller.decide.queue
    in_function: bool
    for_types: bool  # under ``if TYPE_CHECKING:``


def package_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return parts[0] if parts else ""


def sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def imports_of(path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool, for_types: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in child.names] if isinstance(child, ast.Import) else [child.module or ""]
                if isinstance(child, ast.ImportFrom) and child.module == "controller":  # a package, or the version
                    names = [f"controller.{a.name}" if (ROOT / a.name).exists() else "controller" for a in child.names]
                found.extend(Import(path, child.lineno, name, in_function, for_types) for name in names)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True, for_types)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(child, in_function, True)
            else:
                visit(child, in_function, for_types)

    visit(tree, False, False)
    return found


def allowed(package: str, target: str, for_types: bool) -> bool:
    """May ``package`` import ``target`` (a module of ours, without the ``controller.`` prefix)?"""
    if target in ("", "__init__") or target.split(".")[0] == package:
        return True
    rules = MAY_IMPORT[package] | (MAY_IMPORT_FOR_TYPES.get(package, set()) if for_types else set())
    return any(target == rule or target.startswith(rule + ".") for rule in rules)


def layer_violations(paths: list[Path]) -> list[str]:
    problems = []
    for path in paths:
        package = package_of(path)
        for imp in imports_of(path):
            if imp.module != "controller" and not imp.module.startswith("controller."):
                continue
            target = imp.module.removeprefix("controller").removeprefix(".")
            if not allowed(package, target, imp.for_types):
                problems.append(f"{path.relative_to(ROOT.parent)}:{imp.line}: {package} imports controller.{target}")
    return problems


def io_violations(paths: list[Path]) -> list[str]:
    problems = []
    for path in paths:
        where = path.relative_to(ROOT.parent)
        for imp in imports_of(path):
            if imp.module.split(".")[0] in IO_MODULES:
                problems.append(f"{where}:{imp.line}: imports {imp.module}")
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in IO_CALLS:
                problems.append(f"{where}:{node.lineno}: calls {func.id}()")
            elif isinstance(func, ast.Attribute) and func.attr in CLOCK_CALLS:
                problems.append(f"{where}:{node.lineno}: reads a clock ({ast.unparse(func)}())")
            elif isinstance(func, ast.Attribute) and func.attr == "astimezone" and not node.args:
                problems.append(f"{where}:{node.lineno}: uses the process time zone (astimezone())")
    return problems


def unexplained_lazy_imports(paths: list[Path]) -> list[str]:
    """Imports inside functions without a ``# lazy: reason`` on their line, the line above, or
    any line of the block of imports they stand in."""
    problems = []
    for path in paths:
        lines = path.read_text().splitlines()
        for imp in imports_of(path):
            if not imp.in_function:
                continue
            first = last = imp.line
            while first > 1 and lines[first - 2].strip().startswith(("import ", "from ")):
                first -= 1
            while last < len(lines) and lines[last].strip().startswith(("import ", "from ")):
                last += 1
            block = lines[max(first - 2, 0) : last]
            if not any("# lazy:" in line for line in block):
                problems.append(
                    f"{path.relative_to(ROOT.parent)}:{imp.line}: import {imp.module} inside a function, no '# lazy: reason'"
                )
    return problems


def private_imports(paths: list[Path]) -> list[str]:
    """``from controller.x import _name`` across packages, or between two CLI verbs."""
    problems = []
    for path in paths:
        package = package_of(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("controller."):
                continue
            target = node.module.split(".")[1]
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if private and (target != package or package == "cli"):
                problems.append(
                    f"{path.relative_to(ROOT.parent)}:{node.lineno}: imports {', '.join(private)} from {node.module}"
                )
    return problems


def long_functions(paths: list[Path], limit: int) -> list[str]:
    problems = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    problems.append(
                        f"{path.relative_to(ROOT.parent)}:{node.lineno}: {node.name} is {length} lines (at most {limit})"
                    )
    return problems


def function_length(path: Path, name: str) -> int:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node.end_lineno - node.lineno + 1
    raise AssertionError(f"{name} not found in {path}")


# --- the rules --------------------------------------------------------------------------------------


def test_every_package_has_a_row():
    packages = {package_of(p) for p in sources()} - {"__init__"}
    assert packages <= MAY_IMPORT.keys(), (
        f"add a row to MAY_IMPORT (and docs/design.md) for {packages - MAY_IMPORT.keys()}"
    )


def test_each_package_imports_only_what_its_row_allows():
    assert layer_violations(sources()) == []


def test_decide_does_no_io():
    assert io_violations(sorted((ROOT / "decide").rglob("*.py"))) == []


def test_imports_inside_functions_say_why():
    assert unexplained_lazy_imports(sources()) == []


def test_private_names_stay_in_their_package_and_verb():
    assert private_imports(sources()) == []


def test_decide_functions_are_short_and_the_driver_shorter():
    assert long_functions(sorted((ROOT / "decide").rglob("*.py")), MAX_DECIDE_LINES) == []
    # the driver: draft (reconcile only freezes the plan it drafts)
    assert function_length(ROOT / "decide" / "reconcile.py", "draft") <= MAX_DRIVER_LINES


# --- the checks themselves can fail -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("package", "source", "complaint"),
    [
        ("model", "from controller.decide.queue import schedule_pending\n", "model imports controller.decide.queue"),
        ("act", "from controller.decide.reconcile import decide\n", "act imports controller.decide.reconcile"),
        (
            "cli",
            "def f():\n    from controller.daemon.loop import Controller  # lazy: x\n",
            "cli imports controller.daemon.loop",
        ),
        ("web", "from controller.cli.common import CliError\n", "web imports controller.cli.common"),
        ("decide", "from controller.observe.host import HostFacts\n", "decide imports controller.observe.host"),
        # validation is api's (api/validation.py): a reader of manifests needs no decision
        ("observe", "from controller.decide.admission import admit\n", "observe imports controller.decide.admission"),
        (
            "client",
            "def f():\n    from controller.decide.admission import admit  # lazy: x\n",
            "client imports controller.decide.admission",
        ),
    ],
)
def test_a_forbidden_import_is_reported(tmp_path, monkeypatch, package, source, complaint):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    path = tmp_path / package / "bad.py"
    path.parent.mkdir()
    path.write_text(source)
    assert [p.split(": ", 1)[1] for p in layer_violations([path])] == [complaint]


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ("import os\n", "imports os"),
        ("import time\n", "imports time"),
        ("def f():\n    return open('x')\n", "calls open()"),
        ("def f(moment):\n    return moment.astimezone()\n", "uses the process time zone (astimezone())"),
        ("def f(datetime):\n    return datetime.now()\n", "reads a clock (datetime.now())"),
    ],
)
def test_io_in_decide_is_reported(tmp_path, monkeypatch, source, complaint):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    path = tmp_path / "decide" / "bad.py"
    path.parent.mkdir()
    path.write_text(source)
    assert [p.split(": ", 1)[1] for p in io_violations([path])] == [complaint]


def test_an_unexplained_lazy_import_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    path = tmp_path / "cli" / "bad.py"
    path.parent.mkdir()
    path.write_text("def f():\n    import json\n\n\ndef g():\n    import json  # lazy: only g needs it\n")
    assert [p.split(": ", 1)[1] for p in unexplained_lazy_imports([path])] == [
        "import json inside a function, no '# lazy: reason'"
    ]


@pytest.mark.parametrize(
    ("package", "source", "complaint"),
    [
        ("cli", "from controller.cli.apply import _store\n", "imports _store from controller.cli.apply"),
        ("daemon", "from controller.decide.queue import _preempt\n", "imports _preempt from controller.decide.queue"),
    ],
)
def test_a_private_import_is_reported(tmp_path, monkeypatch, package, source, complaint):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    path = tmp_path / package / "bad.py"
    path.parent.mkdir()
    path.write_text(source)
    assert [p.split(": ", 1)[1] for p in private_imports([path])] == [complaint]
    (tmp_path / "api").mkdir()
    inside = tmp_path / "api" / "fine.py"
    inside.write_text("from controller.api.job import _Model\n")  # a package's own base class
    assert private_imports([inside]) == []

"""The layers of docs/architecture.md, enforced.

An AST walk over every module of the package finds every import (at module level and
inside functions, absolute and relative) and checks it against the import rules:

* ``mltcp.core`` imports only itself and the standard library at module level (it is
  mirrored by the kernel and ns-3, and every layer imports it);
* ``mltcp.host`` never imports ``mltcp.lab`` or ``mltcp.cli``, and never numpy,
  matplotlib or the lab's other packages, anywhere: a training host runs it;
* ``mltcp.lab`` never imports ``mltcp.cli``; inside it the two wings, ``lab.scenario``
  and ``lab.cluster``, never import each other: both stand on the shared room
  (``lab.common``) and the engines (``lab.models``), which import neither wing; and the
  cluster wing's packages import only those below them (engine, arrivals, schedulers,
  papers, experiments, in that order);
* ``mltcp.hook`` (what a training script imports) imports only ``mltcp.core`` and the
  standard library at module level (torch inside the functions that attach a model),
  and ``mltcp.workloads`` (training under torchrun) only the hook, core and torch:
  neither imports the host datapath, the lab or the CLI, which a training process never
  needs;
* the host commands' CLI modules (``mltcp.cli.host``, ``mltcp.cli.dcqcn``) import no
  lab module and none of those packages either.

Then at run time: the host commands and ``mltcp backends`` (listing the registry) run in
a fresh interpreter whose loaded modules are inspected.  And the checker itself is
tested on a copy of the tree with a deliberate violation, so that it can fail.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "mltcp"

# Which layers a layer may import.  mltcp/__init__.py ("root") holds only the version:
# every layer may read it, and it imports no layer.
ALLOWED = {
    "root": set(),
    "core": {"core", "root"},
    "host": {"core", "host", "root"},
    "lab": {"core", "host", "lab", "hook", "root"},
    "cli": {"core", "host", "lab", "cli", "hook", "root"},
    "hook": {"core", "hook", "root"},
    "workloads": {"core", "hook", "workloads", "root"},
}
HEAVY = {"numpy", "matplotlib", "pandas", "pyarrow", "dask", "distributed", "scipy", "ns",
         "cppyy", "torch"}
HOST_CLI = ("mltcp.cli.host", "mltcp.cli.dcqcn")
# The lab's rooms and what each may import of the lab: the wings never import each
# other; the shared room and the models import neither wing.
LAB_ROOMS = {
    "scenario": {"scenario", "common", "models"},
    "cluster": {"cluster", "common", "models"},
    "common": {"common"},
    "models": {"models"},
}
# The cluster wing's packages, bottom up: each imports only itself and those before it.
CLUSTER_LAYERS = ("engine", "arrivals", "schedulers", "papers", "experiments")
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


@dataclass(frozen=True)
class Import:
    module: str        # the importing module
    target: str        # the imported module (absolute)
    line: int
    top_level: bool    # at module level (runs on import), not inside a function


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(root: Path, package: str, base: str, name: str) -> str:
    """``from base import name``: the submodule ``base.name`` if it exists, else ``base``."""
    candidate = f"{base}.{name}"
    path = root.joinpath(*candidate.split("."))
    return candidate if path.with_suffix(".py").exists() or (path / "__init__.py").exists() \
        else base


# A module's imports by (module name, text): the tests' copies of the tree have the
# package's layout (what _resolve looks at), so an unchanged module is parsed once per
# session instead of once per copy (54 tests took a minute of CPU parsing the same text).
_PARSED: dict[tuple[str, str], list[Import]] = {}


def imports_of(root: Path, path: Path) -> list[Import]:
    """Every import in one module, with whether it runs at import time."""
    module = module_name(root, path)
    text = path.read_text()
    if (module, text) not in _PARSED:
        _PARSED[module, text] = _parse_imports(root, path, module, text)
    return _PARSED[module, text]


def _parse_imports(root: Path, path: Path, module: str, text: str) -> list[Import]:
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(text, str(path))
    out: list[Import] = []

    def visit(node: ast.AST, top_level: bool, in_type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            tc = in_type_checking or (isinstance(child, ast.If)
                                      and "TYPE_CHECKING" in ast.unparse(child.test))
            nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import) and not tc:
                out.extend(Import(module, a.name, child.lineno, top_level) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and not tc:
                if child.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - child.level + 1])
                    base = f"{base}.{child.module}" if child.module else base
                else:
                    base = child.module or ""
                for a in child.names:
                    out.append(Import(module, _resolve(root, package, base, a.name),
                                      child.lineno, top_level))
            visit(child, top_level and not nested, tc)

    visit(tree, True, False)     # `if TYPE_CHECKING:` blocks never run: not imports
    return out


def layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return "root"
    if parts[1] == "__main__":
        return "cli"        # ``python -m mltcp``: the command line's entry point
    return parts[1] if parts[1] in ALLOWED else None


def lab_room(module: str) -> str | None:
    """``scenario``, ``cluster``, ``common`` or ``models`` for a module of the lab (None
    for ``mltcp.lab`` itself and anything outside the lab)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == [PACKAGE, "lab"] and len(parts) > 2 else None


def cluster_layer(module: str) -> int | None:
    """The index in :data:`CLUSTER_LAYERS` of a module of the cluster wing's packages."""
    parts = module.split(".")
    if parts[:3] != [PACKAGE, "lab", "cluster"] or len(parts) < 4:
        return None
    return CLUSTER_LAYERS.index(parts[3]) if parts[3] in CLUSTER_LAYERS else None


def violations(root: Path) -> list[str]:
    """Every import that breaks a rule, as 'module:line imports target (why)'."""
    found = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        for imp in imports_of(root, path):
            mine, theirs = layer(imp.module), layer(imp.target)
            top_pkg = imp.target.split(".")[0]
            where = f"{imp.module}:{imp.line} imports {imp.target}"
            if theirs is not None and theirs not in ALLOWED[mine]:
                found.append(f"{where} ({mine} must not import {theirs})")
            if mine in ("core", "hook") and imp.top_level and theirs is None \
                    and top_pkg not in STDLIB:
                found.append(f"{where} ({mine} imports only the standard library at load)")
            if mine == "host" and top_pkg in HEAVY:
                found.append(f"{where} (the host never needs {top_pkg})")
            if imp.module in HOST_CLI and (theirs == "lab" or top_pkg in HEAVY):
                found.append(f"{where} (a host command must not load the lab or {top_pkg})")
            room, their_room = lab_room(imp.module), lab_room(imp.target)
            if room and their_room and their_room not in LAB_ROOMS[room]:
                found.append(f"{where} (lab.{room} must not import lab.{their_room})")
            below, above = cluster_layer(imp.module), cluster_layer(imp.target)
            if below is not None and above is not None and above > below:
                found.append(f"{where} (cluster.{CLUSTER_LAYERS[below]} must not import "
                             f"cluster.{CLUSTER_LAYERS[above]})")
    return found


# --------------------------------------------------------------------------- the rules hold


def test_the_tree_keeps_the_import_rules() -> None:
    assert violations(REPO) == []


def test_every_module_belongs_to_a_layer() -> None:
    for path in (REPO / PACKAGE).rglob("*.py"):
        module = module_name(REPO, path)
        assert layer(module) is not None, path
        if layer(module) == "lab" and module != "mltcp.lab":
            assert lab_room(module) in LAB_ROOMS, path
        if lab_room(module) == "cluster" and module != "mltcp.lab.cluster":
            assert cluster_layer(module) is not None, path


# --------------------------------------------------------------------------- ... and can fail


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / PACKAGE, tmp_path / PACKAGE,
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(tmp_path) == []
    return tmp_path


@pytest.mark.parametrize(("module", "line", "expected"), [
    ("host/jobs.py", "from mltcp.lab import report\n", "host must not import lab"),
    ("host/telemetry.py", "def f():\n    from mltcp.lab.models import fluid_engine\n",
     "host must not import lab"),
    ("host/agent.py", "from ..lab.scenario.runner import run_scenario\n",
     "host must not import lab"),
    ("host/maps.py", "import numpy\n", "the host never needs numpy"),
    ("core/iteration.py", "from mltcp.host import maps\n", "core must not import host"),
    ("core/budget.py", "import numpy as np\n", "core imports only the standard library"),
    ("lab/scenario/plan.py", "from mltcp.cli import main\n", "lab must not import cli"),
    ("lab/scenario/sweep.py", "def f():\n    from mltcp.lab.cluster.engine import simulator\n",
     "lab.scenario must not import lab.cluster"),
    ("lab/cluster/engine/simulator.py", "from ...scenario import trace\n",
     "lab.cluster must not import lab.scenario"),
    ("lab/common/provenance.py", "from mltcp.lab.cluster.experiments import report\n",
     "lab.common must not import lab.cluster"),
    ("lab/models/fluid_engine.py", "from mltcp.lab.scenario.plan import RunPlan\n",
     "lab.models must not import lab.scenario"),
    ("lab/cluster/engine/network.py", "from mltcp.lab.cluster.papers.cassini import links\n",
     "cluster.engine must not import cluster.papers"),
    ("lab/cluster/papers/vclos/schedulers.py",
     "from mltcp.lab.cluster.experiments import registry\n",
     "cluster.papers must not import cluster.experiments"),
    ("hook/iteration.py", "import torch\n", "hook imports only the standard library at load"),
    ("hook/records.py", "from mltcp.host import jobs\n", "hook must not import host"),
    ("hook/env.py", "def f():\n    from mltcp.lab.scenario import trace\n",
     "hook must not import lab"),
    ("workloads/ddp.py", "from mltcp.host import jobs\n", "workloads must not import host"),
    ("workloads/models.py", "from mltcp.cli import main\n", "workloads must not import cli"),
    ("cli/host.py", "def g():\n    from mltcp.lab.scenario import runner\n",
     "a host command must not load the lab"),
])
def test_a_deliberate_violation_is_caught(tree_copy: Path, module: str, line: str,
                                          expected: str) -> None:
    path = tree_copy / PACKAGE / module
    path.write_text(path.read_text() + "\n" + line)
    found = violations(tree_copy)
    assert len(found) == 1 and expected in found[0], found


def test_type_checking_imports_do_not_count(tree_copy: Path) -> None:
    path = tree_copy / PACKAGE / "host" / "jobs.py"
    path.write_text(path.read_text() + "\nfrom typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from mltcp.lab.scenario.plan import RunPlan\n")
    assert violations(tree_copy) == []


# --------------------------------------------------------------------------- at run time


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    probe = (f"import sys, json, contextlib, io\n{code}\n"
             "print(json.dumps(sorted(sys.modules)))")
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "MLTCP_PIN_ROOT": "/sys/fs/bpf/mltcp-archtest", "MLTCP_STATE_DIR": "/nonexistent"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


HOST_COMMANDS = [["doctor", "--no-build", "--json"], ["job", "list"], ["status", "--json"],
                 ["metrics"], ["dcqcn", "knobs"], ["unload", "--help"], ["load", "--help"],
                 ["agent", "--help"], ["job", "attach", "--help"], ["apply", "--help"]]


@pytest.mark.parametrize("argv", HOST_COMMANDS, ids=lambda a: " ".join(a))
def test_a_host_command_loads_neither_the_lab_nor_numpy(argv: list[str]) -> None:
    loaded = _loaded_after("from mltcp.cli import main\n"
                           "with contextlib.redirect_stdout(io.StringIO()), "
                           "contextlib.redirect_stderr(io.StringIO()), "
                           "contextlib.suppress(SystemExit):\n"
                           f"    main({argv!r})")
    heavy = {m for m in loaded if m.split(".")[0] in HEAVY}
    lab = {m for m in loaded if m.startswith("mltcp.lab.")} - {"mltcp.lab.scenario",
                                                               "mltcp.lab.scenario.backends"}
    assert heavy == set() and lab == set(), (heavy, lab)


def test_the_hook_loads_nothing_but_core_and_the_standard_library() -> None:
    loaded = _loaded_after("from mltcp import hook\nhook.from_env()")
    ours = {m for m in loaded if m.startswith("mltcp.")}
    assert all(m.startswith(("mltcp.hook", "mltcp.core")) for m in ours), ours
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}


def test_listing_backends_imports_none_of_them() -> None:
    loaded = _loaded_after("from mltcp.cli import main\n"
                           "with contextlib.redirect_stdout(io.StringIO()):\n"
                           "    main(['backends'])")
    backends = {m for m in loaded if m.startswith("mltcp.lab.scenario.backends.")}
    assert backends == set() and not {m for m in loaded if m.split(".")[0] in HEAVY}

"""Every figure of the lab and the benchmarks goes through mltcp.lab.common.plotting: no
module switches matplotlib's backend or touches pyplot's global state (a notebook that
imports a report function keeps its own backend), and importing or drawing a cluster
report loads no pyplot."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("mltcp", "bench")


def violations(source: str) -> list[str]:
    """What in ``source`` (Python) switches the backend or imports pyplot: each as
    "line N: what"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name == "matplotlib.pyplot" or a.name.startswith("pylab")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module == "matplotlib.pyplot" or module == "pylab" or (
                    module == "matplotlib" and any(a.name == "pyplot" for a in node.names)):
                found.append(f"line {node.lineno}: from {module} import ...")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("use", "switch_backend") \
                    and isinstance(func.value, ast.Name) \
                    and func.value.id in ("matplotlib", "mpl", "plt"):
                found.append(f"line {node.lineno}: {func.value.id}.{func.attr}(...)")
    return found


def _sources() -> list[Path]:
    return sorted(p for d in SCANNED for p in (ROOT / d).rglob("*.py")
                  if "__pycache__" not in p.parts)


@pytest.mark.parametrize("planted", [
    "import matplotlib\nmatplotlib.use('Agg')\n",
    "import matplotlib as mpl\nmpl.use('Agg')\n",
    "import matplotlib.pyplot as plt\n",
    "from matplotlib import pyplot\n",
    "from matplotlib.pyplot import subplots\n",
    "def f():\n    import matplotlib.pyplot as plt\n    plt.switch_backend('Agg')\n",
])
def test_the_scan_finds_each_way_of_doing_it(planted: str) -> None:
    assert violations(planted)


def test_the_scan_lets_the_figure_api_and_words_in_docstrings_pass() -> None:
    ok = ('"""never matplotlib.use("Agg") or import matplotlib.pyplot"""\n'
          "from matplotlib.figure import Figure\nfrom matplotlib.patches import Patch\n"
          "fig = Figure()\nfig.savefig('x.png')\n")
    assert violations(ok) == []


def test_no_module_of_the_lab_or_the_benchmarks_switches_the_backend_or_uses_pyplot(
        ) -> None:
    sources = _sources()
    assert len(sources) > 50 and any(p.name == "report.py" for p in sources)
    bad = {str(p.relative_to(ROOT)): v for p in sources
           if (v := violations(p.read_text()))}
    assert bad == {}


def _fresh(code: str) -> str:
    """``code`` run in a fresh interpreter (its stdout)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_cluster_report_loads_no_pyplot() -> None:
    out = _fresh("import sys\n"
                 "import mltcp.lab.cluster.experiments.report\n"
                 "print('matplotlib.pyplot' in sys.modules)\n")
    assert out.strip() == "False"


def test_drawing_a_cluster_report_loads_no_pyplot_and_keeps_the_backend(
        tmp_path: Path) -> None:
    out = _fresh(
        "import sys\n"
        "import matplotlib\n"
        "matplotlib.rcParams['backend'] = 'svg'      # a user's choice, kept\n"
        "from mltcp.lab.cluster.experiments import config, report, runner\n"
        "cfg = config.load_config('small')\n"
        "result = runner.execute(cfg, progress=None)\n"
        f"report.write(result, {str(tmp_path)!r})\n"
        "print('matplotlib.pyplot' in sys.modules, matplotlib.rcParams['backend'])\n")
    assert out.split() == ["False", "svg"]
    assert (tmp_path / "jct_cdf.png").is_file() and (tmp_path / "jct_cdf.pdf").is_file()

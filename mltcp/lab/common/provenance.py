"""Where a result's numbers came from: the build, the machine, the versions.

Every trace of the scenario wing and every report of the cluster wing carries one
(:func:`provenance`), so that a surprising figure can be traced back to the commit and
host that made it.
"""

from __future__ import annotations

import datetime
import functools
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

import mltcp
from mltcp.lab.common.runset import command_line

# The checkout this package runs from, if any: mltcp/lab/common/ -> the repository.
_REPO_DIR = Path(__file__).resolve().parents[3]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(_REPO_DIR), *args], capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# Packages whose version changes the numbers where they were used (numba compiles the
# fluid engine; torch runs the DDP workload and trains the RL scheduler's policy, which
# runs in numpy).  ns-3's version comes with the ns-3 backend's own provenance.
_USED_PACKAGES = ("numba", "torch", "stable_baselines3")


def _used_versions() -> dict[str, str]:
    """The version of each of :data:`_USED_PACKAGES` that this process imported."""
    out = {}
    for name in _USED_PACKAGES:
        if name in sys.modules:
            try:
                out[name] = metadata.version(name.replace("_", "-"))
            except metadata.PackageNotFoundError:
                out[name] = getattr(sys.modules[name], "__version__", "unknown")
    return out


@functools.cache
def code_state() -> tuple[str, bool]:
    """The checkout's HEAD (``"unknown"`` outside a checkout) and whether its tracked
    files had uncommitted changes, read once per process.

    Why once: a result must name the code that made it, which is the code the process
    loaded when it started.  A cluster experiment or a sweep runs for an hour; read at
    its end, the checkout may hold commits (or edits) made meanwhile, which the running
    process never ran.  So the commands that write results read it as they start
    (``mltcp.cli``'s ``records_results``) and every provenance of the process repeats it.
    """
    top = _git("rev-parse", "--show-toplevel")
    in_checkout = top is not None and Path(top).resolve() == _REPO_DIR
    sha = _git("rev-parse", "HEAD") if in_checkout else None
    status = _git("status", "--porcelain", "--untracked-files=no") if in_checkout else None
    return sha or "unknown", bool(status)


def provenance(extra: dict | None = None) -> dict:
    """Where a trace's numbers came from, so a surprising result can be traced to its build.

    Keys: ``git_sha`` (HEAD of the checkout this package runs from, ``"unknown"``
    when it is installed rather than run from a checkout: only a checkout whose
    top level is the package's parent directory counts, so a virtual
    environment inside some other repository does not lend its SHA),
    ``git_dirty`` (uncommitted changes to tracked files; False when unknown),
    ``kernel`` (platform.release()), ``hostname``, ``python``, ``mltcp`` and
    ``numpy`` (versions), ``numba``/``torch``/``stable_baselines3`` (versions, where
    this process used them), ``argv`` (the command that made the result, as the CLI
    parsed it), ``time_utc`` (ISO 8601).  ``extra`` is merged last and wins, e.g. a
    remote host's kernel or an ns-3 version.
    """
    sha, dirty = code_state()
    info = {
        "git_sha": sha,
        "git_dirty": dirty,
        "kernel": platform.release(),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "mltcp": mltcp.__version__,
        "numpy": np.__version__,
        **_used_versions(),
        "argv": command_line(),
        "time_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if extra:
        info.update(extra)
    return info

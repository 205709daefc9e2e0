"""What the hosts backend asks of each training host, over its SSH session.

Every question goes to the host's own ``mltcp`` (``python -m mltcp.cli -j ...``, the
Python the inventory names) or to a short script run by that Python, and comes back as
JSON: the backend never parses human output.  Hosts that report the same kernel boot id
share one kernel (containers, or the namespace hosts of the tests): the eBPF datapath
and the job registry are per kernel, so the backend loads modules and attaches jobs
once per kernel, not once per host (:func:`kernels`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from mltcp.lab.scenario.hosts.inventory import HostSpec
from mltcp.lab.scenario.hosts.ssh import HostError, Session

# Run by the host's Python: facts for provenance and for deciding what can run there.
_FACTS = r"""
import json, platform, shutil, socket, subprocess
from importlib import metadata
out = {"hostname": socket.gethostname(), "kernel": platform.release(),
       "python": platform.python_version()}
out["boot_id"] = open("/proc/sys/kernel/random/boot_id").read().strip()
def version(*names):
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return None
# Versions from the installed distributions: importing torch here would cost seconds.
out["mltcp"] = version("mltcp")
out["torch"] = version("torch")
out["nccl"] = version("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
out["cuda"] = version("nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12",
                      "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu11")
gpus = []
if shutil.which("nvidia-smi"):
    q = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=30)
    gpus = [ln.strip() for ln in q.stdout.splitlines() if ln.strip()] if q.returncode == 0 else []
out["gpus"] = gpus
print(json.dumps(out))
"""


@dataclass(frozen=True)
class HostFacts:
    """One host as it describes itself (the trace's provenance)."""

    name: str
    hostname: str
    kernel: str
    boot_id: str
    python: str
    mltcp: str | None
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    gpus: tuple[str, ...] = ()
    problem: str | None = None     # why mltcp or torch did not import, if one did not

    def to_dict(self) -> dict:
        return {"name": self.name, "hostname": self.hostname, "kernel": self.kernel,
                "boot_id": self.boot_id, "python": self.python, "mltcp": self.mltcp,
                "torch": self.torch, "cuda": self.cuda, "nccl": self.nccl,
                "gpus": list(self.gpus), "problem": self.problem}


class RemoteHost:
    """One inventory host behind its open :class:`Session`."""

    def __init__(self, spec: HostSpec, session: Session) -> None:
        self.spec = spec
        self.session = session

    def _json(self, argv: Sequence[str], timeout_s: float = 120, check: bool = True) -> object:
        proc = self.session.run(argv, timeout_s=timeout_s, check=check)
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            raise HostError(f"host {self.spec.name}: {' '.join(argv[:4])}... printed no JSON "
                            f"(exit {proc.returncode}): {proc.stderr.strip()[-200:]}") from None

    def facts(self) -> HostFacts:
        data = self._json([self.spec.python, "-c", _FACTS], timeout_s=60)
        assert isinstance(data, dict)
        problem = ("mltcp is not installed for " + self.spec.python if data["mltcp"] is None
                   else "torch is not installed (pip install 'mltcp[torch]')"
                   if data["torch"] is None else None)
        return HostFacts(name=self.spec.name, hostname=data["hostname"], kernel=data["kernel"],
                         boot_id=data["boot_id"], python=data["python"], mltcp=data["mltcp"],
                         torch=data.get("torch"), cuda=data.get("cuda"), nccl=data.get("nccl"),
                         gpus=tuple(data.get("gpus") or ()), problem=problem)

    def mltcp_argv(self, *args: str) -> list[str]:
        """The command line of ``mltcp -j ARGS`` on the host (its Python's module)."""
        return [self.spec.python, "-m", "mltcp.cli", "-j", *args]

    def mltcp(self, *args: str, timeout_s: float = 120, check: bool = True) -> object:
        """``mltcp -j ARGS`` on the host; its JSON document."""
        return self._json(self.mltcp_argv(*args), timeout_s=timeout_s, check=check)

    def doctor(self) -> dict:
        """The host's ``mltcp doctor`` (its exit status says only whether all checks pass,
        so a failing doctor is still an answer)."""
        data = self.mltcp("doctor", check=False)
        if not isinstance(data, dict) or "checks" not in data:
            raise HostError(f"host {self.spec.name}: mltcp doctor answered {data!r}")
        return data


def kernels(facts: Sequence[HostFacts]) -> dict[str, list[str]]:
    """Host names grouped by the kernel they run on (boot id), in inventory order."""
    out: dict[str, list[str]] = {}
    for f in facts:
        out.setdefault(f.boot_id, []).append(f.name)
    return out

"""The RL scheduler's policy file: a MaskablePPO checkpoint (stable-baselines3's zip),
checked and loaded as ``policy(obs, mask) -> action`` without PyTorch.

Every check reads the zip with the standard library (the class and spaces from its
``data`` JSON, the class by name without importing it), and the policy is evaluated by
:mod:`.numpy_policy` from the network copy the zip carries.  A zip without that copy
(a policy saved before it existed, or by another tool) gets one derived from its
``policy.pth`` in memory where PyTorch and stable-baselines3 are installed
(:mod:`.numpy_export`), and is refused in one line naming the fix where they are not.

Why NumPy always, not only where PyTorch is missing: the decisions are the same
(tests/test_rl_numpy_policy.py compares them on thousands of observations of real
runs), so one evaluator everywhere keeps a run's results from depending on which
extras happen to be installed, and it is much faster per decision than a PyTorch call.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import json
import pickle
import re
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mltcp.core.errors import CapabilityError, SpecError
from mltcp.lab.cluster.papers.deepshare_rl import numpy_policy
from mltcp.lab.cluster.papers.deepshare_rl.encoding import Layout
from mltcp.lab.cluster.papers.deepshare_rl.numpy_policy import MlpPolicy, NotDerived
from mltcp.lab.common import inputfile

Policy = Callable[[np.ndarray, np.ndarray], int]

POLICY_FIX = ("give a policy written by mltcp cluster rl-train (NAME.zip), or a shipped one "
              "(rl-base, rl-hybrid@deepshare-normal-w0.4-jct)")     # schedulers.SHIPPED_JCT
# What a policy file may fail with inside stable-baselines3 once the checks below have
# passed (a damaged member, weights of another network's shape): each is the file's
# fault, reported in one line naming it.
LOAD_ERRORS = (ValueError, AssertionError, KeyError, TypeError, RuntimeError, EOFError,
               OSError, zipfile.BadZipFile, pickle.UnpicklingError, AttributeError,
               ImportError)
# The one policy class the NumPy evaluator runs (MaskablePPO's "MlpPolicy"), by name.
MASKABLE = ("sb3_contrib.common.maskable.policies", "MaskableActorCriticPolicy")
EXPORT = "python -m mltcp.lab.cluster.papers.deepshare_rl.numpy_export"


def load_policy(path: str | Path, layout: Layout | None = None) -> Policy:
    """A MaskablePPO checkpoint as ``policy(obs, mask) -> action`` (deterministic),
    evaluated in NumPy (:mod:`.numpy_policy`; see the module's docstring for why
    always).

    The file is checked first (:func:`check_policy_file`): a directory, a FIFO, an
    unreadable file, something that is not a zip, a zip without a policy, a policy of
    another algorithm and, with ``layout``, one trained for another environment (other
    observation or action spaces) are each one line naming the file, refused when the
    config is read rather than a traceback at the first decision of a run.

    Loaded once per file and process (the file's size and time of change are part of
    the key, so a rewritten policy is read again): every run of an experiment builds
    its own scheduler, and the policy, which keeps no state between decisions, is
    shared by them."""
    path = inputfile.regular_file(Path(path), "policy", "a policy file", POLICY_FIX)
    info = path.stat()
    return _loaded(str(path.resolve()), info.st_size, info.st_mtime_ns, layout).act


@functools.lru_cache(maxsize=8)
def _loaded(path: str, size: int, mtime_ns: int, layout: Layout | None) -> MlpPolicy:
    check_policy_file(Path(path), layout)
    network = numpy_network(Path(path))
    if layout is not None and (network.obs_shape, network.actions) != (layout.shape,
                                                                        layout.actions):
        raise SpecError("policy", f"{path} has a NumPy copy of its network of another shape "
                        f"({network.obs_shape} -> {network.actions}) than its spaces",
                        f"write it again: {EXPORT} {path}")
    return network


def numpy_network(path: Path) -> MlpPolicy:
    """The network ``path`` carries for NumPy, or one derived from its ``policy.pth``
    (in memory, where PyTorch is installed) when it carries none or a stale one."""
    try:
        return numpy_policy.read(path)
    except NotDerived as err:
        why = str(err)
    from mltcp.lab.cluster.papers.deepshare_rl import numpy_export

    try:
        return numpy_export.derive(path.read_bytes(), str(path))
    except CapabilityError:
        raise CapabilityError(
            f"{path} {why}, and deriving one from its policy.pth needs PyTorch and "
            f"stable-baselines3: pip install 'mltcp[rl]', or add it once where they are "
            f"installed ({EXPORT} {path}), or retrain it with mltcp cluster rl-train"
        ) from None


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class Saved:
    """What a policy zip's ``data`` says of the policy, read without
    stable-baselines3: its class as (module, name), its spaces in a few characters
    (``Box(4, 24)``, ``Discrete(29)``); None where it cannot be read."""

    policy_class: tuple[str, str] | None
    observes: str | None
    acts: str | None


def check_policy_file(path: Path, layout: Layout | None = None) -> None:
    """Refuse, in one line naming ``path``, a file that is not a MaskablePPO policy of
    the RL scheduler: not a zip (empty, text, truncated), a zip without
    stable-baselines3's ``data`` and ``policy.pth``, a policy of another class (PPO's
    ActorCriticPolicy), and with ``layout`` one whose observation or action space is
    not this scheduler's (a policy of another environment loads, then fails at the
    first decision)."""
    saved = saved_data(path)
    _check_class(path, saved.policy_class)
    if layout is not None:
        _check_spaces(path, saved, layout)


def saved_data(path: Path) -> Saved:
    """The ``data`` member of a stable-baselines3 zip, as far as the checks need it."""
    if not zipfile.is_zipfile(path):
        what = "is empty" if path.stat().st_size == 0 else \
            "is not a zip file (a text file, another format, or a truncated policy)"
        raise SpecError("policy", f"{path} {what}", POLICY_FIX)
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            damaged = archive.testzip()
            text = archive.read("data").decode("utf-8") if "data" in names else ""
    except (zipfile.BadZipFile, OSError, EOFError, UnicodeDecodeError) as err:
        raise SpecError("policy", f"{path} is a damaged zip file ({first_line(err)})",
                        POLICY_FIX) from None
    if damaged is not None:
        raise SpecError("policy", f"{path} is a damaged zip file ({damaged} fails its "
                        "checksum)", POLICY_FIX)
    missing = [m for m in ("data", "policy.pth") if m not in names]
    if missing:
        raise SpecError("policy", f"{path} is a zip without a stable-baselines3 policy "
                        f"(no {missing[0]!r} in it)", POLICY_FIX)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise SpecError("policy", f"{path} has an unreadable 'data' member "
                        f"({first_line(err)})", POLICY_FIX) from None
    if not isinstance(data, dict):
        raise SpecError("policy", f"{path} has an unreadable 'data' member (a JSON "
                        f"{type(data).__name__}, not an object)", POLICY_FIX)
    return Saved(_class_reference(data.get("policy_class")),
                 _space_text(data.get("observation_space")),
                 _space_text(data.get("action_space")))


class _References(pickle.Unpickler):
    """Unpickles a class pickled by reference as its (module, name), importing nothing
    and running nothing: anything else in the pickle fails."""

    def find_class(self, module: str, name: str) -> tuple[str, str]:   # type: ignore[override]
        return (module, name)


def _serialised(entry: object) -> bytes | None:
    if not isinstance(entry, dict) or not isinstance(entry.get(":serialized:"), str):
        return None
    try:
        return base64.b64decode(entry[":serialized:"], validate=True)
    except (binascii.Error, ValueError):
        return None


def _class_reference(entry: object) -> tuple[str, str] | None:
    """``policy_class`` as stable-baselines3 saves it (cloudpickle: a class by
    reference) as (module, name)."""
    raw = _serialised(entry)
    if raw is None:
        return None
    try:
        found = _References(io.BytesIO(raw)).load()
    except Exception:          # noqa: BLE001 - any pickle but a bare reference is unreadable
        return None
    ok = isinstance(found, tuple) and len(found) == 2 and all(isinstance(s, str) for s in found)
    return found if ok else None


_TYPE = re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>")


def _space_text(entry: object) -> str | None:
    """A gymnasium space of ``data`` in a few characters, from the plain fields
    stable-baselines3 writes beside each pickled object (the type, ``_shape``, a
    Discrete's ``n``); where those are missing (a file not written by it), from the
    pickle, as stable-baselines3 itself would read it."""
    if not isinstance(entry, dict):
        return None
    kind = _TYPE.fullmatch(str(entry.get(":type:", "")))
    shape = entry.get("_shape")
    if kind and kind[1] == "Discrete" and str(entry.get("n", "")).isdigit():
        return f"Discrete({int(entry['n'])})"
    if kind and kind[1] != "Discrete" and isinstance(shape, list) \
            and all(isinstance(n, int) for n in shape):
        return f"{kind[1]}{tuple(shape)}"
    raw = _serialised(entry)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            space = pickle.loads(raw) if raw is not None else None
    except Exception:          # noqa: BLE001 - a space that cannot be read is refused below
        return None
    return _space(space) if hasattr(space, "shape") else None


def _space(space: object) -> str:
    """A gymnasium space in a few characters: ``Box(4, 24)``, ``Discrete(29)``."""
    name = type(space).__name__
    if name == "Discrete":
        return f"Discrete({int(space.n)})"          # type: ignore[attr-defined]
    return f"{name}{tuple(space.shape)}"            # type: ignore[attr-defined]


def _check_class(path: Path, policy_class: tuple[str, str] | None) -> None:
    if policy_class == MASKABLE:
        return
    if policy_class is None:
        raise SpecError("policy", f"{path} does not say which policy class it holds (its "
                        "policy_class cannot be read)", POLICY_FIX)
    raise SpecError("policy", f"{path} holds a policy of class {policy_class[1]}, not "
                    "MaskablePPO's MaskableActorCriticPolicy (a policy of another algorithm)",
                    POLICY_FIX)


def _check_spaces(path: Path, saved: Saved, layout: Layout) -> None:
    """The policy's spaces against the scheduler's: observations in a Box of
    ``layout.shape`` and actions in ``Discrete(layout.actions)``."""
    if saved.observes is None or saved.acts is None:
        raise SpecError("policy", f"{path} does not say what it observes and does (its "
                        "spaces cannot be read)", POLICY_FIX)
    ours = (f"Box{layout.shape}", f"Discrete({layout.actions})")
    theirs = (saved.observes, saved.acts)
    if theirs != ours:
        raise SpecError("policy", f"{path} is a policy of another environment: it observes "
                        f"{theirs[0]} and acts in {theirs[1]}, the RL scheduler observes "
                        f"{ours[0]} and acts in {ours[1]}",
                        "train one for it (mltcp cluster rl-train), or use a shipped one "
                        "(rl-base)")


def first_line(err: BaseException, limit: int = 120) -> str:
    """The start of a library's message: enough to say what failed, on one line."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line if len(line) <= limit else line[:limit - 3] + "..."

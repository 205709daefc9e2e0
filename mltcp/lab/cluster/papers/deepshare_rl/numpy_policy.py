"""The RL scheduler's policy network in NumPy: a MaskablePPO checkpoint's deterministic
decisions without PyTorch.

Why: a deployed RL scheduler (``mltcp cluster run`` with ``rl-base``/``rl-hybrid``) only
asks its policy for the deterministic action, the most probable one the mask allows.
The network behind it is small (the observation flattened, two tanh layers of 64, a
linear layer of one logit per action): NumPy computes it in microseconds, where
stable-baselines3 needs PyTorch, a multi-gigabyte install, to compute the same.
Training still needs PyTorch (:mod:`.train`).

The weights travel inside the policy's zip as one more member, :data:`MEMBER` (an
``.npz``; stable-baselines3's loader reads only ``data`` and the ``.pth`` members and
passes over it), written from that zip's own ``policy.pth`` when the policy is saved
(:mod:`.numpy_export`).  The checkpoint stays the one source of truth: the member
records the SHA-256 of the ``policy.pth`` it was taken from, and :func:`read` refuses a
member that is not that of the zip's ``policy.pth`` (a zip edited afterwards), as it
refuses a zip without one (a policy saved before this module, or by another tool).

How a decision matches stable-baselines3's (tests/test_rl_numpy_policy.py checks it on
thousands of observations of real runs): sb3-contrib's ``predict(...,
deterministic=True)`` computes the logits in float32, replaces those of masked actions
by -1e8 and takes the first index of the largest probability.  Here the same network
runs in float64 on the float32 weights (exactly the checkpoint's numbers; float64 keeps
this side's rounding far below float32's), masked actions get -inf, and the first index
of the largest logit is taken (the softmax keeps the order).  The two can differ only
where two allowed logits are within float32 rounding of each other: on the tests'
states of real runs the logits agree to 4e-6 and the two largest allowed ones are at
least 1e-3 apart.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MEMBER = "numpy_policy.npz"        # inside the policy zip; SB3 loads only *.pth and data
SOURCE = "policy.pth"              # the checkpoint's weights, which MEMBER is taken from
FORMAT = 1                         # of MEMBER's arrays (below); another is refused

ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,                                # stable-baselines3's default
    "relu": lambda x: np.maximum(x, 0.0),
}


class NotDerived(Exception):
    """A policy zip without a usable :data:`MEMBER`; the message says what is wrong
    with it, to follow the zip's path ("has no NumPy copy of its network")."""


@dataclass(frozen=True, eq=False)
class MlpPolicy:
    """A MaskablePPO MLP policy's actor: ``hidden`` layers (weights ``out x in``, biases)
    each followed by ``activation``, then the ``action`` layer (logits); the
    observation flattened first (stable-baselines3's FlattenExtractor).  ``source``:
    the SHA-256 of the ``policy.pth`` these weights were copied from.  The arrays are
    the checkpoint's float32 numbers; :meth:`logits` computes in float64."""

    obs_shape: tuple[int, ...]
    hidden: tuple[tuple[np.ndarray, np.ndarray], ...]
    action: tuple[np.ndarray, np.ndarray]
    activation: str
    source: str
    _wide: tuple[tuple[np.ndarray, np.ndarray], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        _check(self)
        object.__setattr__(self, "_wide", tuple(
            (w.astype(np.float64), b.astype(np.float64)) for w, b in (*self.hidden, self.action)))

    @property
    def actions(self) -> int:
        return int(self.action[0].shape[0])

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """The action logits (before masking) of one observation (``obs_shape``: a
        vector of :attr:`actions`) or a batch of them (``(n, *obs_shape)``: ``n x
        actions``)."""
        x = np.asarray(obs, dtype=np.float64)
        batched = x.ndim > len(self.obs_shape)
        x = x.reshape(-1, int(np.prod(self.obs_shape)))
        act = ACTIVATIONS[self.activation]
        *hidden, (w_out, b_out) = self._wide
        for w, b in hidden:
            x = act(x @ w.T + b)
        out = x @ w_out.T + b_out
        return out if batched else out[0]

    def act(self, obs: np.ndarray, mask: np.ndarray) -> int:
        """The deterministic action: the largest logit among the actions ``mask``
        allows (0 when it allows none, as sb3-contrib's argmax over equal
        probabilities gives)."""
        allowed = np.asarray(mask, dtype=bool).reshape(-1)
        return int(np.argmax(np.where(allowed, self.logits(obs), -np.inf)))


def _check(policy: MlpPolicy) -> None:
    """Every layer's shape follows from the one before: a member of another network
    fails here, not at the first decision."""
    if policy.activation not in ACTIVATIONS:
        raise ValueError(f"activation {policy.activation!r} is not one of "
                         f"{', '.join(ACTIVATIONS)}")
    width = int(np.prod(policy.obs_shape))
    for i, (w, b) in enumerate((*policy.hidden, policy.action)):
        if w.ndim != 2 or b.shape != (w.shape[0],) or w.shape[1] != width:
            raise ValueError(f"layer {i} is {w.shape} + {b.shape}, after a layer of {width}")
        width = w.shape[0]


# --------------------------------------------------------------------------- the member


def to_npz(policy: MlpPolicy) -> bytes:
    """``policy`` as :data:`MEMBER`'s bytes: NumPy's ``.npz`` (one ``.npy`` per array),
    written with a fixed time stamp so that one checkpoint always gives the same bytes
    (a retraining compares equal: scripts/identity)."""
    arrays: dict[str, np.ndarray] = {
        "format": np.array(FORMAT), "obs_shape": np.array(policy.obs_shape, dtype=np.int64),
        "activation": np.array(policy.activation), "source": np.array(policy.source),
        "action_weight": policy.action[0], "action_bias": policy.action[1]}
    for i, (w, b) in enumerate(policy.hidden):
        arrays[f"hidden{i}_weight"], arrays[f"hidden{i}_bias"] = w, b
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as npz:
        for name, arr in arrays.items():
            one = io.BytesIO()
            np.lib.format.write_array(one, np.asarray(arr, order="C"), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            npz.writestr(info, one.getvalue())
    return buf.getvalue()


def from_npz(raw: bytes) -> MlpPolicy:
    """:data:`MEMBER`'s bytes as a policy; ValueError (or a zip/NumPy error) when they
    are not one of :data:`FORMAT`."""
    with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
        found = {name: npz[name] for name in npz.files}
    fmt = found.get("format", np.array(None)).item()
    if fmt != FORMAT:
        raise ValueError(f"format {fmt}, not {FORMAT}")
    hidden = []
    while f"hidden{len(hidden)}_weight" in found:
        i = len(hidden)
        hidden.append((found[f"hidden{i}_weight"], found[f"hidden{i}_bias"]))
    return MlpPolicy(tuple(int(n) for n in found["obs_shape"]), tuple(hidden),
                     (found["action_weight"], found["action_bias"]),
                     str(found["activation"].item()), str(found["source"].item()))


def source_digest(archive: zipfile.ZipFile) -> str:
    """The SHA-256 of a policy zip's ``policy.pth`` (its uncompressed bytes)."""
    return hashlib.sha256(archive.read(SOURCE)).hexdigest()


def read(path: Path) -> MlpPolicy:
    """The NumPy network a policy zip carries; :class:`NotDerived` when it carries none,
    one it cannot read, or one taken from another ``policy.pth`` than its own."""
    with zipfile.ZipFile(path) as archive:
        if MEMBER not in archive.namelist():
            raise NotDerived(f"has no NumPy copy of its network ({MEMBER})")
        digest = source_digest(archive)
        raw = archive.read(MEMBER)
    try:
        policy = from_npz(raw)
    except (ValueError, KeyError, OSError, zipfile.BadZipFile) as err:
        raise NotDerived(f"has a NumPy copy of its network ({MEMBER}) that cannot be read "
                         f"({str(err).strip()[:80] or type(err).__name__})") from None
    if policy.source != digest:
        raise NotDerived(f"has a NumPy copy of its network ({MEMBER}) taken from another "
                         "policy.pth than its own (the zip was changed after it was written)")
    return policy

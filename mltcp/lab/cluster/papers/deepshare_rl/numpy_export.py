"""A MaskablePPO checkpoint's network copied into its zip for :mod:`.numpy_policy`.

This side needs PyTorch and stable-baselines3 (the ``rl`` extra), as the training that
writes a checkpoint does; the evaluator needs neither.  Why a copy rather than reading
``policy.pth`` without PyTorch: that member is PyTorch's own pickle format (tensors
rebuilt by torch functions from storages), which a reader of our own would have to
follow across PyTorch versions; the copy is taken by PyTorch itself, from the zip's
own bytes, once, where PyTorch is installed anyway, and it names the ``policy.pth`` it
came from (its SHA-256), which the evaluator checks.

:func:`with_network` is what ``mltcp cluster rl-train`` applies to every policy it
writes; a policy written before, or by another tool, gets its copy with

    python -m mltcp.lab.cluster.papers.deepshare_rl.numpy_export POLICY.zip [...]

(the shipped policies got theirs so).  Only the network's actor is copied: the
observation flattened, the MLP's policy layers, the action layer; another network
(a CNN, an image normalisation, another activation) is refused in one line.
"""

from __future__ import annotations

import argparse
import io
import sys
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mltcp.core.errors import CapabilityError, SpecError
from mltcp.lab.cluster.papers.deepshare_rl import numpy_policy
from mltcp.lab.cluster.papers.deepshare_rl import policy_file as rl_file
from mltcp.lab.cluster.papers.deepshare_rl.numpy_policy import MEMBER, MlpPolicy
from mltcp.lab.common import inputfile
from mltcp.lab.common.atomic import write_bytes

PROG = "python -m mltcp.lab.cluster.papers.deepshare_rl.numpy_export"


def _libraries() -> Any:
    try:
        import torch
        from gymnasium.spaces import Box
        from sb3_contrib import MaskablePPO
        from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
        from stable_baselines3.common.preprocessing import is_image_space
        from stable_baselines3.common.torch_layers import FlattenExtractor
    except ImportError:
        raise CapabilityError("copying a policy's network out of its policy.pth needs "
                              "PyTorch and stable-baselines3: pip install 'mltcp[rl]'") from None
    return torch, Box, MaskablePPO, MaskableActorCriticPolicy, is_image_space, FlattenExtractor


def derive(policy_zip: bytes, name: str = "the policy") -> MlpPolicy:
    """The network of the checkpoint whose zip is ``policy_zip``, read by
    stable-baselines3; a one-line SpecError naming ``name`` when it cannot be loaded
    or is not a network :mod:`.numpy_policy` runs."""
    torch, Box, MaskablePPO, MaskablePolicy, is_image_space, Flatten = _libraries()
    try:
        with zipfile.ZipFile(io.BytesIO(policy_zip)) as archive:
            source = numpy_policy.source_digest(archive)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = MaskablePPO.load(io.BytesIO(policy_zip), device="cpu")
    except rl_file.LOAD_ERRORS as err:
        raise SpecError("policy", f"{name} cannot be loaded as a MaskablePPO policy "
                        f"({rl_file.first_line(err)})", rl_file.POLICY_FIX) from None
    policy = model.policy
    try:
        if type(policy) is not MaskablePolicy:
            raise ValueError(f"its policy is a {type(policy).__name__}, not "
                             "MaskableActorCriticPolicy")
        space = policy.observation_space
        if not isinstance(space, Box) or (policy.normalize_images and is_image_space(space)):
            raise ValueError(f"it observes {space} (a Box of numbers is what it runs)")
        if type(policy.pi_features_extractor) is not Flatten:
            raise ValueError("its features extractor is a "
                             f"{type(policy.pi_features_extractor).__name__}, not a Flatten")
        return _network(torch, policy, source)
    except ValueError as err:
        raise SpecError("policy", f"{name} holds a network that the NumPy evaluator does not "
                        f"run ({err})", "train it with mltcp cluster rl-train (its MLP policy)"
                        ) from None


def _network(torch: Any, policy: Any, source: str) -> MlpPolicy:
    """The actor of an SB3 MLP policy: ``mlp_extractor.policy_net`` is Linear,
    activation, Linear, activation, ... (MlpExtractor's layout), then ``action_net``."""
    names = {torch.nn.Tanh: "tanh", torch.nn.ReLU: "relu"}
    layers = list(policy.mlp_extractor.policy_net)
    linears, activations = layers[0::2], layers[1::2]
    if len(linears) != len(activations) or not all(
            type(m) is torch.nn.Linear for m in [*linears, policy.action_net]):
        raise ValueError("its policy layers are not Linear and activation in turn")
    kinds = {names.get(type(m), type(m).__name__) for m in activations}
    if len(kinds) > 1 or not kinds <= set(numpy_policy.ACTIVATIONS):
        raise ValueError(f"its activations are {', '.join(sorted(kinds))}")

    def copy(m: Any) -> tuple[np.ndarray, np.ndarray]:
        return (m.weight.detach().cpu().numpy().astype(np.float32),
                m.bias.detach().cpu().numpy().astype(np.float32))

    return MlpPolicy(tuple(int(n) for n in policy.observation_space.shape),
                     tuple(copy(m) for m in linears), copy(policy.action_net),
                     kinds.pop() if kinds else "tanh", source)


def with_network(policy_zip: bytes, name: str = "the policy") -> bytes:
    """``policy_zip`` with :data:`~.numpy_policy.MEMBER` taken from its own
    ``policy.pth`` (replacing one it had); its other members are kept byte for byte."""
    member = numpy_policy.to_npz(derive(policy_zip, name))
    buf = io.BytesIO(policy_zip)
    with zipfile.ZipFile(buf) as archive:
        stale = MEMBER in archive.namelist()
    if stale:                                   # zipfile cannot drop a member: rebuild
        out = io.BytesIO()
        with zipfile.ZipFile(buf) as src, zipfile.ZipFile(out, "w") as dst:
            for info in src.infolist():
                if info.filename != MEMBER:
                    dst.writestr(info, src.read(info))
        buf = out
    with zipfile.ZipFile(buf, "a") as archive:
        info = zipfile.ZipInfo(MEMBER, date_time=(1980, 1, 1, 0, 0, 0))
        archive.writestr(info, member)          # stored: an .npz is a zip already
    return buf.getvalue()


def add_network(path: Path) -> int:
    """Write the policy file at ``path`` again with its NumPy copy (atomically);
    the copy's size in bytes."""
    updated = with_network(path.read_bytes(), str(path))
    write_bytes(path, updated)
    with zipfile.ZipFile(path) as archive:
        return archive.getinfo(MEMBER).file_size


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Add to MaskablePPO policy files (mltcp cluster rl-train's "
        "NAME.zip) the NumPy copy of their network that the RL scheduler evaluates "
        "without PyTorch.")
    parser.add_argument("policies", nargs="+", metavar="POLICY.zip")
    args = parser.parse_args(argv)
    for given in args.policies:
        try:
            path = inputfile.regular_file(Path(given), "policy", "a policy file",
                                          rl_file.POLICY_FIX)
            rl_file.check_policy_file(path)
            size = add_network(path)
        except (SpecError, CapabilityError, OSError) as err:
            print(f"{PROG}: error: {err}", file=sys.stderr)
            return 3 if isinstance(err, CapabilityError) else 2
        print(f"{path}: {MEMBER} written ({size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

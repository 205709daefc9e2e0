"""Who this process is and what the environment asks of the hook.

A training script under ``torchrun`` (or any launcher of ``torch.distributed``'s
``env://`` rendezvous) has ``RANK`` and ``WORLD_SIZE`` in its environment; the mltcp
variables turn the hook on without changing the script beyond two lines:

* ``MLTCP_HOOK_OUT``: where records go (a directory: ``hook-rank<N>.jsonl`` in it; or a
  ``.jsonl`` file name, ``{rank}`` filled in); unset: no file;
* ``MLTCP_JOB``: the datapath job's name (``mltcp job attach NAME``);
* ``MLTCP_HOOK_SIGNAL``: ``1`` to signal the end of each iteration to the agent;
* ``MLTCP_AGENT_SOCKET``: the agent's socket (default ``/run/mltcp/agent.sock``; at most
  107 bytes, a Unix socket's limit, checked when the hook signals).

``RANK`` and ``WORLD_SIZE`` are refused as those variables when they are not integers
or out of range (``WORLD_SIZE`` 1..65536, ``RANK`` below it), never replaced.
"""

from __future__ import annotations

import os
import sys

from mltcp.core import validate
from mltcp.core.errors import SpecError

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def env_flag(name: str) -> bool:
    """A yes/no variable; unset or empty is no."""
    value = os.environ.get(name, "")
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise SpecError(name, f"{value!r} is not a flag", f"set {name}=1 or {name}=0")


def env_text(name: str) -> str | None:
    """A variable's text; unset or empty is None."""
    return os.environ.get(name) or None


def _env_int(name: str, minimum: int, maximum: int) -> int | None:
    """A launcher's integer variable, refused as that variable: a world of more than
    ``validate.MAX_WORLD_SIZE`` ranks (what the workload's ``--workers`` allows) is a
    typo, not a job."""
    return validate.env_integer(os.environ, name, minimum, maximum,
                                "the launcher (torchrun) sets it; unset it otherwise")


def _process_group() -> tuple[int, int] | None:
    """The rank and world size of an initialised ``torch.distributed`` default group,
    if the script has one: looked up in ``sys.modules``, so torch is never imported
    here."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def identity(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """This process's rank and the world size: as given, else the initialised process
    group's, else ``RANK``/``WORLD_SIZE``, else a single process (0 of 1)."""
    group = _process_group()
    if rank is None:
        rank = group[0] if group else _env_int("RANK", 0, validate.MAX_WORLD_SIZE - 1)
    if world_size is None:
        world_size = group[1] if group else _env_int("WORLD_SIZE", 1,
                                                       validate.MAX_WORLD_SIZE)
    rank = validate.at_least(0 if rank is None else rank, "rank", 0,
                             "give the process's rank, an integer >= 0")
    world_size = validate.at_least(1 if world_size is None else world_size, "world_size", 1,
                                   "give the number of processes")
    if rank >= world_size:
        raise SpecError("rank", f"{rank} is not below world_size {world_size}",
                        "give a rank from 0 to world_size - 1")
    return rank, world_size

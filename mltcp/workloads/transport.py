"""Which collective library carries the gradients, and over what: TCP, always.

MLTCP is a TCP congestion control: it shapes the traffic only where the collectives run
over TCP.  gloo (CPU hosts) always does.  NCCL (GPU hosts) prefers InfiniBand/RoCE
verbs when it finds an RDMA NIC, which bypass the kernel's TCP entirely; so for NCCL this
sets ``NCCL_IB_DISABLE=1`` and ``NCCL_NET=Socket`` (NCCL's socket transport: TCP) unless
they are set, and refuses settings that would take the traffic off TCP.  RoCE hosts that
should keep RDMA use the DCQCN tuner (``mltcp dcqcn``) instead of this workload's TCP
path.  ``NCCL_SOCKET_IFNAME``/``GLOO_SOCKET_IFNAME`` (the data-plane interface) are the
launcher's to set and are reported as they are.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass

from mltcp.core.errors import CapabilityError, SpecError


@dataclass(frozen=True)
class Transport:
    """The collective library chosen and a line saying how its traffic travels."""

    backend: str        # "gloo" or "nccl"
    description: str


def choose(backend: str, cuda: bool,
           environ: MutableMapping[str, str] | None = None) -> Transport:
    """``backend`` (auto, gloo, nccl) on a host with or without CUDA; for NCCL the
    environment is set for TCP (before ``init_process_group`` reads it)."""
    env = os.environ if environ is None else environ
    if backend == "auto":
        backend = "nccl" if cuda else "gloo"
    if backend == "gloo":
        iface = env.get("GLOO_SOCKET_IFNAME")
        return Transport("gloo", "gloo over TCP" + (f" on {iface}" if iface else ""))
    if not cuda:
        raise CapabilityError("--backend nccl: this host has no CUDA GPU that PyTorch can use; "
                              "use --backend gloo (or auto) on CPU hosts")
    ib = env.setdefault("NCCL_IB_DISABLE", "1")
    if ib.strip() != "1":
        raise SpecError("NCCL_IB_DISABLE", f"is {ib!r}: NCCL would use RDMA, which bypasses "
                        "TCP and so MLTCP", "unset it or set it to 1 (RoCE hosts: use the "
                        "DCQCN tuner, `mltcp dcqcn`)")
    net = env.setdefault("NCCL_NET", "Socket")
    if net.strip().lower() != "socket":
        raise SpecError("NCCL_NET", f"is {net!r}: NCCL would not use its TCP socket transport",
                        "unset it or set it to Socket")
    iface = env.get("NCCL_SOCKET_IFNAME")
    return Transport("nccl", "NCCL over TCP sockets (NCCL_IB_DISABLE=1, NCCL_NET=Socket"
                     + (f", NCCL_SOCKET_IFNAME={iface}" if iface else "")
                     + "): MLTCP's congestion control applies")

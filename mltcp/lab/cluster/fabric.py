"""A GPU cluster's network: servers with several GPUs on a two-tier leaf-spine.

The scenario topologies (:mod:`mltcp.lab.graph`) place one worker per host and build a
general graph; a cluster of thousands of GPUs needs neither: traffic between GPUs of one
server stays inside it (NVLink/PCIe, not the network), and a leaf-spine's paths are
known in closed form.  Links, all directed:

* each server's NIC, up (server -> leaf) and down (leaf -> server);
* each leaf-spine pair, up and down, at ``servers_per_leaf x server_gbit /
  oversubscription / spines`` (so a leaf's uplinks together carry its servers' traffic
  divided by the oversubscription).

A flow between servers under one leaf crosses the two NICs; between leaves it also
crosses one spine, picked per flow by ECMP (a hash of the flow, as a switch hashes the
5-tuple).  Capacities are TCP payload bytes per second (the rate x MSS / frame at the
MTU), as everywhere in the fluid model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from mltcp.core import validate
from mltcp.core.errors import SpecError

ETHERNET_AND_TCP_IP = (14, 52)          # frame header; IP + TCP with timestamps


@dataclass(frozen=True)
class LeafSpine:
    """``leaves`` x ``servers_per_leaf`` servers of ``gpus_per_server`` GPUs each,
    ``spines`` spines; ``server_gbit`` per NIC; ``oversubscription`` of the leaves'
    uplinks (1 = non-blocking)."""

    leaves: int
    servers_per_leaf: int
    spines: int
    gpus_per_server: int = 8
    server_gbit: float = 100.0
    oversubscription: float = 1.0
    mtu_bytes: int = 1500

    def __post_init__(self) -> None:
        validate.integer(self.leaves, "cluster.leaves", 1, 4096, "32")
        validate.integer(self.servers_per_leaf, "cluster.servers_per_leaf", 1, 1024, "8")
        validate.integer(self.spines, "cluster.spines", 1, 1024, "8")
        validate.integer(self.gpus_per_server, "cluster.gpus_per_server", 1, 64, "8")
        validate.number(self.server_gbit, "cluster.server_gbit", 0, 10_000, "100",
                        lo_open=True)
        validate.number(self.oversubscription, "cluster.oversubscription", 1, 64, "4",
                        fix="use 1 (non-blocking) or more, e.g. 4")
        validate.integer(self.mtu_bytes, "cluster.mtu_bytes", 576, 9216, "1500")

    @property
    def servers(self) -> int:
        return self.leaves * self.servers_per_leaf

    @property
    def gpus(self) -> int:
        return self.servers * self.gpus_per_server

    @property
    def uplink_gbit(self) -> float:
        return self.servers_per_leaf * self.server_gbit / self.oversubscription / self.spines

    @property
    def payload_efficiency(self) -> float:
        frame, headers = ETHERNET_AND_TCP_IP
        return (self.mtu_bytes - headers) / (self.mtu_bytes + frame)

    @property
    def links(self) -> int:
        return 2 * self.servers + 2 * self.leaves * self.spines

    def leaf_of(self, server: int) -> int:
        return server // self.servers_per_leaf

    # Link indices: NIC up, NIC down, leaf->spine, spine->leaf.
    def nic_up(self, server: int) -> int:
        return server

    def nic_down(self, server: int) -> int:
        return self.servers + server

    def leaf_up(self, leaf: int, spine: int) -> int:
        return 2 * self.servers + leaf * self.spines + spine

    def leaf_down(self, leaf: int, spine: int) -> int:
        return 2 * self.servers + self.leaves * self.spines + leaf * self.spines + spine

    def link_ids(self) -> list[str]:
        """Names in index order: ``s3>leaf0``, ``leaf0>s3``, ``leaf0>spine1``, ..."""
        ids = [f"s{s}>leaf{self.leaf_of(s)}" for s in range(self.servers)]
        ids += [f"leaf{self.leaf_of(s)}>s{s}" for s in range(self.servers)]
        ids += [f"leaf{leaf}>spine{p}" for leaf in range(self.leaves)
                for p in range(self.spines)]
        ids += [f"spine{p}>leaf{leaf}" for leaf in range(self.leaves)
                for p in range(self.spines)]
        return ids

    def capacities(self) -> np.ndarray:
        """Payload bytes per second of every link, in index order."""
        eff = self.payload_efficiency
        nic = self.server_gbit * 1e9 / 8 * eff
        up = self.uplink_gbit * 1e9 / 8 * eff
        n_fabric = 2 * self.leaves * self.spines
        return np.concatenate([np.full(2 * self.servers, nic), np.full(n_fabric, up)])

    def path(self, src: int, dst: int, flow_key: str, seed: int = 0,
             spine: int | None = None) -> list[int]:
        """The links a flow from server ``src`` to ``dst`` crosses; between leaves the
        spine is ``spine`` (source routing) or else ECMP's pick for ``flow_key`` (stable
        across runs, varied by ``seed``)."""
        if src == dst:
            return []
        a, b = self.leaf_of(src), self.leaf_of(dst)
        if a == b:
            return [self.nic_up(src), self.nic_down(dst)]
        if spine is None:
            # A mixing hash: CRC-32's low bits are linear in the key, so modulo a power
            # of two the seed did not change a job's spines and its flows followed a
            # fixed pattern.
            digest = hashlib.blake2b(f"{seed}:{flow_key}".encode(), digest_size=8).digest()
            spine = int.from_bytes(digest, "little") % self.spines
        elif not 0 <= spine < self.spines:
            raise SpecError("spines", f"spine {spine} of flow {flow_key} is not one of the "
                            f"cluster's {self.spines}", f"use 0..{self.spines - 1}")
        return [self.nic_up(src), self.leaf_up(a, spine), self.leaf_down(b, spine),
                self.nic_down(dst)]

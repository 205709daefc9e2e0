"""A GPU cluster's network: servers with several GPUs on a two-tier leaf-spine.

The scenario topologies (:mod:`mltcp.lab.scenario.graph`) place one worker per host and build a
general graph; a cluster of thousands of GPUs needs neither: traffic between GPUs of one
server stays inside it (NVLink/PCIe, not the network), and a leaf-spine's paths are
known in closed form.  Links, all directed:

* each server's NICs (``rails`` of them, ``server_gbit`` each), up (server -> leaf) and
  down (leaf -> server);
* each leaf-spine pair, up and down, at ``servers_per_leaf x rails x server_gbit /
  oversubscription / spines`` (so a leaf's uplinks together carry its servers' traffic
  divided by the oversubscription).

Several rails model the GPU clusters that bind each GPU to its own NIC (vclos
§4.1, Alibaba's EFLOPS): a server's traffic leaves on ``rails`` separate links, and a
switch hashes each rail's flow on its own, so one job's rails can collide on a
leaf-spine link as two jobs can.  One fat NIC of ``rails x server_gbit`` would carry the
same bytes but hash once, which hides exactly that effect.

A flow between servers under one leaf crosses the two NICs of its rail; between leaves
it also crosses one spine, picked per flow by ECMP (a hash of the flow, as a switch
hashes the 5-tuple).  Capacities are TCP payload bytes per second (the rate x MSS / frame at the
MTU), as everywhere in the fluid model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from mltcp.core import validate
from mltcp.core.errors import SpecError

ETHERNET_AND_TCP_IP = (14, 52)          # frame header; IP + TCP with timestamps
# Peak bytes a run spends per link (the fluid engine's packed row and scratch, the
# capacities), per GPU (a placement's list of free slots) and per server (its free
# count, a scheduler's views), measured on `mltcp cluster run` and rounded up: a cluster
# whose fabric alone would exceed the memory budget is refused when it is described.
LINK_BYTES = 320
GPU_BYTES = 48
SERVER_BYTES = 64


@dataclass(frozen=True)
class LeafSpine:
    """``leaves`` x ``servers_per_leaf`` servers of ``gpus_per_server`` GPUs each,
    ``spines`` spines; ``rails`` NICs a server of ``server_gbit`` each;
    ``oversubscription`` of the leaves' uplinks (1 = non-blocking)."""

    leaves: int
    servers_per_leaf: int
    spines: int
    gpus_per_server: int = 8
    server_gbit: float = 100.0
    oversubscription: float = 1.0
    mtu_bytes: int = 1500
    rails: int = 1

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
        validate.integer(self.rails, "cluster.rails", 1, 64, "8")
        self._check_memory()

    @property
    def memory_bytes(self) -> int:
        """What a run on this fabric spends on the fabric itself (jobs apart)."""
        return (self.links * LINK_BYTES + self.gpus * GPU_BYTES
                + self.servers * SERVER_BYTES)

    def _check_memory(self) -> None:
        """Refuse a fabric whose arrays alone exceed the memory budget, naming the fields
        whose product sizes most of it: each may be in range while their product is not
        (4096 leaves x 1024 servers x 64 GPUs)."""
        parts = {"servers_per_leaf x gpus_per_server":
                 self.gpus * GPU_BYTES + self.servers * SERVER_BYTES,
                 "servers_per_leaf x rails": 2 * self.nics * LINK_BYTES,
                 "spines": 2 * self.leaves * self.spines * LINK_BYTES}
        fields = max(parts, key=lambda k: parts[k])
        validate.within_memory(
            self.memory_bytes, f"cluster.leaves x {fields}",
            f"{self.leaves} leaves x {self.servers_per_leaf} servers x "
            f"{self.gpus_per_server} GPUs (rails = {self.rails}, spines = {self.spines}: "
            f"{self.gpus:,} GPUs, {self.links:,} links)",
            "describe a smaller cluster: fewer leaves, servers_per_leaf, gpus_per_server, "
            "rails or spines")

    @property
    def servers(self) -> int:
        return self.leaves * self.servers_per_leaf

    @property
    def gpus(self) -> int:
        return self.servers * self.gpus_per_server

    @property
    def nic_gbit(self) -> float:
        """A server's NICs together: what prices a job's traffic alone on the network."""
        return self.rails * self.server_gbit

    @property
    def uplink_gbit(self) -> float:
        return self.servers_per_leaf * self.nic_gbit / self.oversubscription / self.spines

    @property
    def payload_efficiency(self) -> float:
        frame, headers = ETHERNET_AND_TCP_IP
        return (self.mtu_bytes - headers) / (self.mtu_bytes + frame)

    def payload_bytes_s(self, gbit: float) -> float:
        """Payload bytes per second of a link of ``gbit``."""
        return gbit * 1e9 / 8 * self.payload_efficiency

    @property
    def server_payload_bytes_s(self) -> float:
        """Payload bytes per second of all a server's NICs together (its ring's rate alone)."""
        return self.payload_bytes_s(self.nic_gbit)

    @property
    def nics(self) -> int:
        return self.servers * self.rails

    @property
    def links(self) -> int:
        return 2 * self.nics + 2 * self.leaves * self.spines

    def leaf_of(self, server: int) -> int:
        return server // self.servers_per_leaf

    # Link indices: NIC up, NIC down (a server's rails adjacent), leaf->spine,
    # spine->leaf.  With one rail a NIC's index is its server's, as before rails existed.
    def nic_up(self, server: int, rail: int = 0) -> int:
        return server * self.rails + rail

    def nic_down(self, server: int, rail: int = 0) -> int:
        return self.nics + server * self.rails + rail

    def leaf_up(self, leaf: int, spine: int) -> int:
        return 2 * self.nics + leaf * self.spines + spine

    def leaf_down(self, leaf: int, spine: int) -> int:
        return 2 * self.nics + self.leaves * self.spines + leaf * self.spines + spine

    def is_fabric_link(self, link: int) -> bool:
        """Whether ``link`` is a leaf-spine link (not a NIC)."""
        return link >= 2 * self.nics

    def _nic_name(self, server: int, rail: int) -> str:
        return f"s{server}" if self.rails == 1 else f"s{server}r{rail}"

    def link_ids(self) -> list[str]:
        """Names in index order: ``s3>leaf0``, ``leaf0>s3``, ``leaf0>spine1``, ...
        (``s3r2`` for rail 2 of server 3 when servers have several rails)."""
        nics = [(s, r) for s in range(self.servers) for r in range(self.rails)]
        ids = [f"{self._nic_name(s, r)}>leaf{self.leaf_of(s)}" for s, r in nics]
        ids += [f"leaf{self.leaf_of(s)}>{self._nic_name(s, r)}" for s, r in nics]
        ids += [f"leaf{leaf}>spine{p}" for leaf in range(self.leaves)
                for p in range(self.spines)]
        ids += [f"spine{p}>leaf{leaf}" for leaf in range(self.leaves)
                for p in range(self.spines)]
        return ids

    def capacities(self) -> np.ndarray:
        """Payload bytes per second of every link, in index order."""
        nic = self.payload_bytes_s(self.server_gbit)
        up = self.payload_bytes_s(self.uplink_gbit)
        n_fabric = 2 * self.leaves * self.spines
        return np.concatenate([np.full(2 * self.nics, nic), np.full(n_fabric, up)])

    def path(self, src: int, dst: int, flow_key: str, seed: int = 0,
             spine: int | None = None, rail: int = 0) -> list[int]:
        """The links a flow on ``rail`` from server ``src`` to ``dst`` crosses (that
        rail's NIC at both ends); between leaves the spine is ``spine`` (source routing)
        or else ECMP's pick for ``flow_key`` (stable across runs, varied by ``seed``)."""
        if not 0 <= rail < self.rails:
            raise SpecError("rail", f"rail {rail} of flow {flow_key} is not one of the "
                            f"servers' {self.rails}", f"use 0..{self.rails - 1}")
        if src == dst:
            return []
        a, b = self.leaf_of(src), self.leaf_of(dst)
        if a == b:
            return [self.nic_up(src, rail), self.nic_down(dst, rail)]
        if spine is None:
            # A mixing hash: CRC-32's low bits are linear in the key, so modulo a power
            # of two the seed did not change a job's spines and its flows followed a
            # fixed pattern.
            digest = hashlib.blake2b(f"{seed}:{flow_key}".encode(), digest_size=8).digest()
            spine = int.from_bytes(digest, "little") % self.spines
        elif not 0 <= spine < self.spines:
            raise SpecError("spines", f"spine {spine} of flow {flow_key} is not one of the "
                            f"cluster's {self.spines}", f"use 0..{self.spines - 1}")
        return [self.nic_up(src, rail), self.leaf_up(a, spine), self.leaf_down(b, spine),
                self.nic_down(dst, rail)]

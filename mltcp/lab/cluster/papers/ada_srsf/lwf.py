"""LWF-κ: least-workload-first placement with a consolidation threshold κ.

The ada-srsf paper (Wang, Shi, Wang, Chu: communication contention aware scheduling),
section IV-A and its Algorithm 1.  A job's *workload* is its remaining service,
``L_J = (C_J + E_J) x |G(J)|`` (Eqs. 7-8): compute time per iteration plus its
contention-free communication time per iteration, times its remaining iterations,
times its GPUs.  Every GPU of a job carries the job's whole ``L_J`` (Algorithm 1,
"L_g += L_J for g in G(J)"), and a server's workload ``L_S`` is the sum over its GPUs.
A job asking for ``n`` GPUs is placed:

* ``n <= κ``: on the ``n`` available GPUs of least workload, anywhere (as List
  Scheduling does): a small job may spread over up to ``n`` servers;
* ``n > κ``: servers sorted by their workload ``L_S``, least first, and the available
  GPUs taken server by server (line 15 of Algorithm 1 walks the whole sorted server
  list, so a job that the first ``ceil(n / N_g)`` servers cannot hold continues on the
  next ones);
* nowhere (None) when fewer than ``n`` GPUs are available.

How this simulator differs from the paper's, and what it does about it.  In the paper a
GPU can hold several placed jobs whose compute tasks queue on it (a GPU is
"available" while it has memory left), so a GPU's workload is the sum of its queued
jobs' remaining work.  Here a GPU holds one job at a time (``ClusterView.free``), so an
available GPU is an idle one and its workload is 0.  Consequences, kept as they fall
out of the paper's rule rather than patched:

* in the ``n <= κ`` branch every candidate ties at 0; the tie keeps the GPUs' index
  order (what a stable sort of the paper's GPU list gives; the paper names no other
  tie-break), so that branch is first fit over the idle GPUs, and List Scheduling
  (LWF with κ at least the cluster's GPUs, :func:`list_scheduling`) coincides with
  first fit here;
* in the ``n > κ`` branch the busy GPUs of a server still count toward ``L_S``, so
  servers whose jobs have little work left (or empty servers) come first: the
  load-balancing and consolidating effect the paper gives κ survives.

Servers of equal workload keep index order.  ``E_J`` is the ring's bytes at the
payload rate of a server's NICs, all its rails together (the paper's ``a + bM`` with
``a = 0``: the fluid model has no per-message latency), 0 on one server
(:func:`mltcp.lab.cluster.engine.gpu_jobs.ring_comm_s`, as SRTF prices it too).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from mltcp.core import validate
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest, ring_comm_s
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.scheduling import Allocation, ClusterView, QueuedJob
from mltcp.lab.cluster.schedulers.queue import PlacementFn


def remaining_workload(fabric: LeafSpine, request: JobRequest, done: int,
                       servers: int | None) -> float:
    """The paper's ``L_J`` of a job with ``done`` iterations finished: GPU-seconds of
    remaining service.  ``servers`` None: not placed yet, so ``E_J = 0`` (the paper's
    rule for ranking queued jobs: their communication is unknown before placement)."""
    per = request.compute_s
    if servers is not None:
        per += ring_comm_s(fabric, request.gradient_bytes, servers)
    return (request.iterations - done) * per * request.gpus


def server_workloads(view: ClusterView) -> np.ndarray:
    """``L_S`` of every server: the remaining workload of each job on its GPUs (running
    ones, and those this decision already placed), counted once per GPU it holds."""
    loads = np.zeros(view.fabric.servers)
    held: list[tuple[float, Iterable[tuple[int, int]]]] = []
    for run in view.running:
        held.append((remaining_workload(view.fabric, run.request, run.done,
                                        len(run.job.gpus)), run.job.gpus))
    for job, where in view.planned:
        held.append((remaining_workload(view.fabric, job.request, job.done,
                                        len(where.gpus)), where.gpus))
    for load, gpus in held:
        for server, n in gpus:
            loads[server] += n * load
    return loads


def _take(free: np.ndarray, servers: Iterable[int], n: int) -> Allocation | None:
    """The idle GPUs of ``servers`` in that order until ``n`` are taken."""
    out, need = [], n
    for server in servers:
        k = min(int(free[server]), need)
        if k > 0:
            out.append((int(server), k))
            need -= k
        if need == 0:
            return Allocation(tuple(out))
    return None


def lwf(kappa: int) -> PlacementFn:
    """LWF-κ (Algorithm 1) as a placement; κ = 1 is the paper's best (section V-B)."""
    kappa = validate.integer(kappa, "placement.kappa", 1, 1 << 20, "1")

    def place(view: ClusterView, job: QueuedJob) -> Allocation | None:
        free, n = view.free, job.gpus
        if int(free.sum()) < n:
            return None                                  # line 22: the empty set
        if n <= kappa:                                   # least L_g: all idle GPUs are 0
            return _take(free, range(len(free)), n)
        loads = server_workloads(view)
        order = sorted(range(len(free)), key=lambda s: (loads[s], s))
        return _take(free, order, n)

    return place


def list_scheduling(fabric: LeafSpine) -> PlacementFn:
    """The paper's LS baseline: the ``n`` least-loaded GPUs for every job (LWF with κ at
    least the cluster's GPU count)."""
    return lwf(fabric.gpus)

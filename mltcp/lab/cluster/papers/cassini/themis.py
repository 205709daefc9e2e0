"""The Themis stand-in: the baseline the thesis's Cassini figures are measured against.

What the thesis says Themis does (§4.4.2, §4.5.1, §4.5.2): it is finish-time-fair, not
network-aware.  Jobs bid for GPUs in auctions (10-minute leases); the arbiter's only
network term is "a slowdown penalty based on whether the workers are under the same
rack or across racks"; for a job it has several placements of the same finish-time
fairness, which differ only in which workers go where (Cassini's step 1 asks Themis for
up to 10 of them).  Which of them Themis takes has nothing to do with the links: at
t = 72 min of the Poisson trace "Themis places [XLM] such that one of the links is shared
with WideResNet101 without the knowledge that XLM and WideResNet101 are not compatible",
and on that trace its iterations are 1.6x (mean) and 1.8x (p99) Th+Cassini's, which is
close to Ideal (§4.5.2).

The stand-in, and why:

* **The candidates are Cassini's** (:func:`~.schedulers.candidate_allocations`:
  consolidated, first fit, first fit from each leaf, random), kept to one rack where the
  job fits in one (:func:`~.schedulers.one_rack_first`: the rack penalty is binary, so
  every cross-rack placement is of equal worth).  Th+Cassini ranks the same candidates
  (:func:`~.schedulers.themis_cassini`), so the two differ only in the pick, as in the
  thesis.
* **The pick is network-blind**: one of the candidates drawn at random (the run's
  seeded generator), routed by ECMP (Themis picks GPUs, not paths).  Taking always the
  first (consolidated) would make Themis network-aware by accident: on this fabric a
  job inside one rack shares no link, and FIFO + first fit, the stand-in before this one,
  shared so seldom that its iterations were 1.18x ideal against the thesis's ~1.6x.
* **A job that fits starts** (no head-of-line blocking): an auction offers the GPUs that
  are free to every bidder.  Jobs are offered them in arrival order.

Not modelled, each of which puts more of the thesis's Themis jobs on shared links than
here: finish-time-fair bidding (the order), elastic re-sizing (Themis hands idle GPUs to
running jobs, so its cluster is always full), lease expiry re-placing running jobs
(tried with 10-minute leases: the sharing did not grow), and DCQCN/PFC, under which a
shared link costs more than its fair share (the fluid model shares max-min fairly).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mltcp.core import validate
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.scheduling import Allocation, ClusterView, Decision, QueuedJob
from mltcp.lab.cluster.papers.cassini.schedulers import candidate_allocations, one_rack_first
from mltcp.lab.cluster.schedulers.orders import fifo
from mltcp.lab.cluster.schedulers.queue import OrderKey, ranked_queue, start_in_order


@dataclass
class ThemisScheduler:
    """Jobs in ``order``, each that fits started on one of up to ``candidates``
    placements of equal worth to Themis, drawn at random and routed by ECMP."""

    name: str = "themis"
    order: OrderKey = field(default=lambda job, now: (job.request.arrival_s,))
    candidates: int = 10
    blocking: bool = False
    round_s: float = 0.0

    def __post_init__(self) -> None:
        validate.integer(self.candidates, "themis.candidates", 1, 1000, "10")

    def decide(self, view: ClusterView) -> Decision:
        return Decision(start_in_order(view, ranked_queue(view, self.order), self.place,
                                       self.blocking))

    def place(self, view: ClusterView, job: QueuedJob) -> Allocation | None:
        """One of ``job``'s equal-worth sets of workers, blind to the links (each set
        once, whatever routes Cassini would try on it; None: it does not fit now)."""
        workers = list(dict.fromkeys(a.gpus for a in self.offered(view, job)))
        if not workers:
            return None
        return Allocation(workers[view.rng.randrange(len(workers))])

    def offered(self, view: ClusterView, job: QueuedJob) -> list[Allocation]:
        """The placements of equal worth Themis has for ``job`` (what Th+Cassini ranks)."""
        return one_rack_first(view.fabric, candidate_allocations(
            view.fabric, view.free, job.gpus, view.rng, self.candidates))


def themis(fabric: LeafSpine) -> ThemisScheduler:
    """The Themis stand-in over arrival order (the registry's ``themis``)."""
    return ThemisScheduler("themis", fifo(fabric))

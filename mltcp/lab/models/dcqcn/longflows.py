"""Long-lived flows on one bottleneck: DCQCN's own test bench, without training jobs.

This is the experiment by which DCQCN is judged (the DCQCN paper's fairness runs) and
the one the MLTCP thesis made by hand (section 3.2: the rate-increase timer of one
job's NICs, 125 -> 100 us, gave it about 30 of 45 Gbit/s): N senders, each with its
NIC's line rate, share one switch link; each may carry its own fixed F, applied to
its knobs by :class:`~mltcp.core.dcqcn.policy.DcqcnPolicy` as the tuner would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.dcqcn.policy import DcqcnPolicy, Mode
from mltcp.core.errors import SpecError
from mltcp.lab.models.dcqcn.model import DcqcnModel, Fabric
from mltcp.lab.models.dcqcn.params import QUEUE_SLOT_BYTES, ModelParams, ScaledKnobs


@dataclass(frozen=True)
class LongFlows:
    """The bench: ``len(f)`` flows, flow i starting at ``start_s[i]`` with F ``f[i]``.

    ``line_bps``: each sender's NIC rate (None: the link's); ``queue_packets``: the
    switch buffer in full-size frames, as in a scenario.
    """

    capacity_bps: float = 40e9
    f: tuple[float, ...] = (1.0, 1.0)
    start_s: tuple[float, ...] = (0.0, 0.0)
    duration_s: float = 0.05
    line_bps: float | None = None
    mode: Mode = Mode.TIMER
    queue_packets: int = 1000
    sample_s: float = 1e-3

    def __post_init__(self) -> None:
        if len(self.f) != len(self.start_s) or not self.f:
            raise SpecError("f", f"{len(self.f)} F values for {len(self.start_s)} start times",
                            "give one F and one start time per flow")
        if any(not (isinstance(x, int | float) and 0 < x <= 128) for x in self.f):
            raise SpecError("f", f"{self.f!r} has a value outside (0, 128]",
                            "give each flow's F, e.g. (1.25, 1.0)")
        if any(not (isinstance(s, int | float) and 0 <= s < self.duration_s)
               for s in self.start_s):
            raise SpecError("start_s", f"{self.start_s!r} has a start outside the run",
                            f"start every flow in [0, {self.duration_s})")
        for name in ("capacity_bps", "duration_s", "sample_s"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and v > 0):
                raise SpecError(name, f"{v!r} is not a positive number", f"give {name} > 0")
        if self.sample_s > self.duration_s:
            raise SpecError("sample_s", f"{self.sample_s} is longer than the run "
                            f"({self.duration_s} s)", "give sample_s <= duration_s")
        if self.line_bps is not None and not self.line_bps > 0:
            raise SpecError("line_bps", f"{self.line_bps!r} is not positive",
                            "give the NIC rate in bit/s, or None for the link's")
        # The policy's own check of the mode (one message for every caller).
        object.__setattr__(self, "mode", DcqcnPolicy(Aggressiveness(0.0, 1.0),
                                                     mode=self.mode).mode)


@dataclass(frozen=True)
class LongFlowsResult:
    """Per sample period ending at ``times``: each flow's delivered rate (bit/s,
    wire), the queue (bytes); over the run, each flow's CNPs, cuts and increase events
    by stage; per lane (seed)."""

    times: np.ndarray             # (T,)
    rates_bps: np.ndarray         # (L, T, F)
    queue_bytes: np.ndarray       # (L, T)
    cnps: np.ndarray              # (L, F)
    knobs: list[dict[str, int]]   # per flow: the increase knobs its F gave
    events: dict[str, np.ndarray]  # per (L, F): cuts and increase events by stage

    def mean_rates(self, after_s: float) -> np.ndarray:
        """(L, F) mean delivered rate over the samples after ``after_s``."""
        keep = self.times > after_s
        if not keep.any():
            raise SpecError("after_s", f"no sample after {after_s}", "pick an earlier time")
        return self.rates_bps[:, keep].mean(axis=1)


def run_long_flows(bench: LongFlows, params: ModelParams | None = None,
                   seeds: Sequence[int] = (0,)) -> LongFlowsResult:
    """Simulate ``bench`` once per seed (as lanes of one model)."""
    params = params or ModelParams()
    n_flows, lanes = len(bench.f), len(seeds)
    if not lanes:
        raise SpecError("seeds", "empty", "give at least one seed")
    cap_Bps = bench.capacity_bps / 8
    line_Bps = (bench.line_bps or bench.capacity_bps) / 8
    fabric = Fabric(
        paths=[[0] for _ in range(n_flows)], capacity_Bps=np.full((lanes, 1), cap_Bps),
        buffer_bytes=np.full((lanes, 1), bench.queue_packets * QUEUE_SLOT_BYTES),
        line_Bps=np.full((lanes, n_flows), line_Bps), seed=np.asarray(seeds))
    model = DcqcnModel(fabric, params)
    baseline = params.all_knobs
    policy = DcqcnPolicy(Aggressiveness(slope=0.0, intercept=max(bench.f)), mode=bench.mode)
    knobs = [{**{n: baseline[n] for n in ScaledKnobs.SCALED}, **policy.targets(baseline, f)}
             for f in bench.f]
    model.set_increase(*(np.array([[k[n] for k in knobs]] * lanes) for n in ScaledKnobs.SCALED))
    start = np.asarray(bench.start_s)[None, :]
    n_steps = int(round(bench.duration_s / model.dt))
    per_sample = max(1, int(round(bench.sample_s / model.dt)))
    times, rates, queues = [], [], []
    last = model.flow_bytes.copy()
    unlimited = np.full((lanes, n_flows), np.inf)
    for i in range(1, n_steps + 1):
        model.step(np.where(model.t[:, None] >= start - 1e-12, unlimited, 0.0))
        if i % per_sample == 0:
            times.append(model.t[0])
            rates.append((model.flow_bytes - last) * 8 / (per_sample * model.dt))
            queues.append(model.queue[:, 0].copy())
            last = model.flow_bytes.copy()
    return LongFlowsResult(np.array(times), np.stack(rates, axis=1), np.stack(queues, axis=1),
                           model.cnps.copy(), knobs,
                           model.event_counts())

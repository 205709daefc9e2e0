"""Live telemetry from the datapath: per job and per flow, as a table or JSON (Prometheus:
:mod:`mltcp.host.exposition`)."""

from __future__ import annotations

import ctypes
import time
from dataclasses import asdict, dataclass, field

from mltcp.core.aggressiveness import FP_ONE
from mltcp.host import maps
from mltcp.host.jobs import Registry


@dataclass
class FlowStatus:
    job: str
    cc: str
    src: str
    dst: str
    cwnd: int
    ssthresh: int
    srtt_us: int
    f: float
    bytes_acked: int
    cwnd_reductions: int
    loss_reductions: int
    age_s: float


@dataclass
class JobStatus:
    name: str
    id: int
    cc: str
    budget: int
    learning: bool
    learned_budget: int
    iteration: int
    bytes_in_iter: int
    bytes_ratio: float
    f: float
    stale: bool
    last_iter_bytes: int
    total_bytes: int
    wraps: int
    gaps: int
    signals: int
    cwnd_reductions: int
    stale_fallbacks: int = 0   # new connections handed the native CC (config stale/disabled)
    history: list[int] = field(default_factory=list)
    flows: list[FlowStatus] = field(default_factory=list)


def _age(now_ns: int, then_ns: int) -> float:
    return max(0.0, (now_ns - then_ns) / 1e9) if then_ns else float("inf")


def collect(registry: Registry | None = None) -> list[JobStatus]:
    """Read every attached job's config/state and its flows from the pinned maps."""
    registry = registry or Registry()
    jobs = registry.read()
    if not jobs or not maps.pin_path("mltcp_job_cfg").exists():
        return []
    now = time.monotonic_ns()
    by_id: dict[int, JobStatus] = {}
    with maps.PinnedMap("mltcp_job_cfg") as cfg_map, maps.PinnedMap("mltcp_job_state") as st_map:
        for name, rec in sorted(jobs.items(), key=lambda kv: kv[1].id):
            key = ctypes.c_uint32(rec.id)
            cfg = cfg_map.get(key, maps.JobCfg) or maps.JobCfg()
            st = st_map.get(key, maps.JobState) or maps.JobState()
            budget = int(cfg.budget)
            stale = bool(cfg.stale_ns) and now - cfg.refreshed_ns > cfg.stale_ns
            by_id[rec.id] = JobStatus(
                name=name, id=rec.id, cc=rec.spec.cc, budget=budget, learning=rec.spec.learn,
                learned_budget=rec.learned_budget, iteration=int(st.iteration),
                bytes_in_iter=int(st.bytes_in_iter),
                bytes_ratio=(st.bytes_in_iter / budget) if budget else 0.0,
                f=(st.f_fp or FP_ONE) / FP_ONE, stale=stale,
                last_iter_bytes=int(st.last_iter_bytes), total_bytes=int(st.total_bytes),
                wraps=int(st.wraps), gaps=int(st.gaps), signals=int(st.signals),
                cwnd_reductions=int(st.cwnd_reductions),
                stale_fallbacks=int(st.stale_fallbacks), history=st.history(),
            )
    with maps.PinnedMap("mltcp_flows") as flows:
        for key in flows.keys(ctypes.c_uint64):
            info = flows.get(key, maps.FlowInfo)
            if info is None or info.job_id not in by_id:
                continue
            job = by_id[info.job_id]
            job.flows.append(FlowStatus(
                job=job.name, cc=maps.CC_NAMES.get(info.cc, "?"),
                src=f"{maps.format_addr(info.family, info.saddr)}:{info.sport}",
                dst=f"{maps.format_addr(info.family, info.daddr)}:{info.dport}",
                cwnd=int(info.cwnd), ssthresh=int(info.ssthresh), srtt_us=int(info.srtt_us),
                f=info.f_fp / FP_ONE, bytes_acked=int(info.bytes_acked),
                cwnd_reductions=int(info.cwnd_reductions),
                loss_reductions=int(info.loss_reductions), age_s=_age(now, info.updated_ns),
            ))
    return list(by_id.values())


def to_json(statuses: list[JobStatus]) -> list[dict]:
    out = []
    for s in statuses:
        d = asdict(s)
        for flow in d["flows"]:
            flow["age_s"] = None if flow["age_s"] == float("inf") else round(flow["age_s"], 3)
        out.append(d)
    return out


def to_table(statuses: list[JobStatus]) -> str:
    if not statuses:
        return "no jobs attached (see `mltcp job attach --help`)"
    lines = [f"{'job':<16}{'id':>4} {'cc':<6}{'iter':>7}{'budget':>14}{'ratio':>7}{'F':>7}"
             f"{'learned':>12}  state"]
    for s in statuses:
        state = "stale" if s.stale else ("learning" if s.learning and not s.budget else "live")
        if s.stale_fallbacks:
            state += f" ({s.stale_fallbacks} new connections ran the native {s.cc})"
        lines.append(f"{s.name:<16}{s.id:>4} {s.cc:<6}{s.iteration:>7}{s.budget:>14}"
                     f"{s.bytes_ratio:>7.3f}{s.f:>7.3f}{s.learned_budget or '-':>12}  {state}")
        for f in sorted(s.flows, key=lambda f: f.src):
            lines.append(f"    {f.src:>22} -> {f.dst:<22} cwnd {f.cwnd:>6} srtt {f.srtt_us:>7}us"
                         f" F {f.f:.3f} cuts {f.cwnd_reductions}")
    return "\n".join(lines)

"""Prometheus metrics and the agent's HTTP endpoints, through ``prometheus_client``.

``prometheus_client`` writes the exposition format (exact values: a 150 MiB budget is
``1.572864e+08``, every digit kept; counters keep moving past 10^6) and its WSGI app
serves ``/metrics`` (content negotiation, gzip, OpenMetrics when asked).  Around it a
small WSGI router adds ``/healthz`` for load balancers and systemd watchdogs, served by
the standard library's threaded WSGI server.  The values come from
:func:`mltcp.host.telemetry.collect` on every scrape: nothing is cached between scrapes.

Every label set is bounded, so a scrape's size is too.  A job has ``job`` and ``cc``
labels (at most ``maps.MAX_JOBS - 1`` jobs, three modules); its flows, whose addresses
and ephemeral ports would make a new series for every connection, are exported by default
only as the job's distribution of cwnd and smoothed RTT (``quantile`` 0, 0.5 and 1: the
smallest, the median and the largest over the job's flows at the scrape; the flow count is
``mltcp_job_flows``).  Per-flow series (``mltcp_flow_cwnd``, ``mltcp_flow_srtt_seconds``
by ``job``, ``src``, ``dst``) are opt-in, ``flows_per_job`` at most per job (the first by
source address and port, so the same flows stay exported from one scrape to the next), and
``mltcp_job_flow_series_dropped`` says how many flows of a job this scrape left out.
:func:`series_bound` gives the count, which README's "Metrics" section tabulates.
"""

from __future__ import annotations

import errno
import json
import socket
import statistics
import threading
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mltcp.core import validate
from mltcp.core.errors import MltcpError, SpecError
from mltcp.host import maps, telemetry
from mltcp.host.jobs import Registry

# (metric, kind, help, JobStatus attribute); counters are named without "_total",
# which prometheus_client appends.
JOB_METRICS = (
    ("mltcp_job_iterations", "counter", "Completed iterations", "iteration"),
    ("mltcp_job_bytes_ratio", "gauge", "Bytes acked in this iteration over the budget",
     "bytes_ratio"),
    ("mltcp_job_f", "gauge", "Current aggressiveness F", "f"),
    ("mltcp_job_budget_bytes", "gauge", "Per-iteration byte budget (0 while learning)", "budget"),
    ("mltcp_job_last_iteration_bytes", "gauge", "Bytes between the last two idle-gap boundaries",
     "last_iter_bytes"),
    ("mltcp_job_acked_bytes", "counter", "Bytes acked for the job", "total_bytes"),
    ("mltcp_job_cwnd_reductions", "counter", "Window reductions on the job's flows",
     "cwnd_reductions"),
    ("mltcp_job_stale", "gauge", "1 when the config is stale and flows run the standard CC",
     "stale"),
    ("mltcp_job_stale_fallbacks", "counter", "New connections of the job handed the kernel's "
     "native CC because its config was stale or disabled", "stale_fallbacks"),
    ("mltcp_job_flows", "gauge", "Flows seen in the flow table", "flows"),
)


# The job's flows as a distribution: (quantile label, statistic over the flows' values).
QUANTILES = (("0", min), ("0.5", statistics.median), ("1", max))
# Per-flow series when asked for: at most this many per job by default, and ever.
DEFAULT_FLOWS_PER_JOB = 64
MAX_FLOWS_PER_JOB = 1024
# The series of one job: the JOB_METRICS, the cwnd and srtt quantiles; with per-flow
# series, two per exported flow and the dropped count.  The host's: the fault counters.
JOB_SERIES = len(JOB_METRICS) + 2 * len(QUANTILES)
HOST_SERIES = 2


def series_bound(jobs: int = maps.MAX_JOBS - 1, flows_per_job: int | None = None) -> int:
    """The most series a scrape holds with ``jobs`` jobs (default: as many as the datapath
    can hold), however many flows they have."""
    per_job = JOB_SERIES if flows_per_job is None else JOB_SERIES + 2 * flows_per_job + 1
    return jobs * per_job + HOST_SERIES


class DatapathCollector(Collector):
    """Reads the jobs, flows and datapath health from the pinned maps at each scrape.

    ``flows_per_job``: export per-flow series, at most this many per job; None: the
    job-level aggregates only (the module's doc says why)."""

    def __init__(self, registry: Registry | None = None,
                 flows_per_job: int | None = None) -> None:
        if flows_per_job is not None:
            validate.integer(flows_per_job, "metrics-flows", 1, MAX_FLOWS_PER_JOB,
                             str(DEFAULT_FLOWS_PER_JOB))
        self.registry = registry or Registry()
        self.flows_per_job = flows_per_job

    def collect(self) -> Iterator[Metric]:
        statuses = telemetry.collect(self.registry)
        for name, kind, help_text, attr in JOB_METRICS:
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(
                name, help_text, labels=["job", "cc"])
            for s in statuses:
                value = getattr(s, attr)
                family.add_metric([s.name, s.cc], len(value) if attr == "flows" else value)
            yield family
        yield from self._flow_distributions(statuses)
        if self.flows_per_job is not None:
            yield from self._flows(statuses, self.flows_per_job)
        health = maps.read_health()
        contained = CounterMetricFamily(
            "mltcp_datapath_fault_contained", "Values TCP held that the module did not decide "
            "(a garbage ssthresh()/undo_cwnd() return, docs/known-issues.md), replaced by the "
            "module's own before any segment was sent", labels=["what"])
        contained.add_metric(["ssthresh"], health.ssthresh_overrides)
        contained.add_metric(["cwnd"], health.cwnd_contained)
        yield contained

    @staticmethod
    def _flow_distributions(statuses: list[telemetry.JobStatus]) -> Iterator[Metric]:
        over = ("over the job's flows at this scrape: quantile 0 the smallest, 0.5 the "
                "median, 1 the largest (no sample while the job has no flow)")
        cwnd = GaugeMetricFamily("mltcp_job_flow_cwnd", f"Congestion window (segments) {over}",
                                 labels=["job", "cc", "quantile"])
        srtt = GaugeMetricFamily("mltcp_job_flow_srtt_seconds", f"Smoothed RTT {over}",
                                 labels=["job", "cc", "quantile"])
        for s in statuses:
            if not s.flows:
                continue
            cwnds = [f.cwnd for f in s.flows]
            srtts = [f.srtt_us / 1e6 for f in s.flows]
            for q, stat in QUANTILES:
                cwnd.add_metric([s.name, s.cc, q], stat(cwnds))
                srtt.add_metric([s.name, s.cc, q], stat(srtts))
        yield cwnd
        yield srtt

    @staticmethod
    def _flows(statuses: list[telemetry.JobStatus], limit: int) -> Iterator[Metric]:
        cwnd = GaugeMetricFamily("mltcp_flow_cwnd", "Congestion window of a job's flow "
                                 "(segments)", labels=["job", "src", "dst"])
        srtt = GaugeMetricFamily("mltcp_flow_srtt_seconds", "Smoothed RTT of a job's flow",
                                 labels=["job", "src", "dst"])
        dropped = GaugeMetricFamily(
            "mltcp_job_flow_series_dropped", "Flows of the job whose per-flow series this "
            "scrape left out (over the limit per job: --metrics-flows N)",
            labels=["job", "cc"])
        for s in statuses:
            kept = sorted(s.flows, key=lambda f: (f.src, f.dst))[:limit]
            for f in kept:
                cwnd.add_metric([s.name, f.src, f.dst], f.cwnd)
                srtt.add_metric([s.name, f.src, f.dst], f.srtt_us / 1e6)
            dropped.add_metric([s.name, s.cc], len(s.flows) - len(kept))
        yield cwnd
        yield srtt
        yield dropped


def metrics_registry(jobs: Registry | None = None,
                     flows_per_job: int | None = None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatapathCollector(jobs, flows_per_job))
    return registry


def render(jobs: Registry | None = None, flows_per_job: int | None = None) -> str:
    """The metrics in the Prometheus text format (what `mltcp metrics` prints)."""
    return generate_latest(metrics_registry(jobs, flows_per_job)).decode()


Health = Callable[[], tuple[bool, dict[str, Any]]]


def wsgi_app(jobs: Registry, health: Health,
             flows_per_job: int | None = None) -> Callable[..., Iterable[bytes]]:
    """``/metrics`` from prometheus_client's app; ``/healthz``: 200 or 503 with JSON."""
    metrics = make_wsgi_app(metrics_registry(jobs, flows_per_job))

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            ok, detail = health()
            body = json.dumps({"status": "ok" if ok else "unhealthy", **detail}).encode()
            start_response("200 OK" if ok else "503 Service Unavailable",
                           [("Content-Type", "application/json"),
                            ("Content-Length", str(len(body)))])
            return [body]
        if path in ("/", "/metrics"):
            return metrics(environ, start_response)
        body = b"not found: try /metrics or /healthz\n"
        start_response("404 Not Found", [("Content-Type", "text/plain"),
                                         ("Content-Length", str(len(body)))])
        return [body]
    return app


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


class HttpEndpoint:
    """The agent's HTTP server: serves from a daemon thread until :meth:`close`."""

    def __init__(self, addr: str, port: int, jobs: Registry, health: Health,
                 flows_per_job: int | None = None) -> None:
        app = wsgi_app(jobs, health, flows_per_job)
        try:
            self.server = make_server(addr, port, app,
                                      server_class=_ThreadingWSGIServer,
                                      handler_class=_QuietHandler)
        except socket.gaierror as exc:
            raise SpecError("--metrics-addr", f"cannot listen on {addr!r} ({exc.strerror})",
                            "give an address of this host, e.g. 127.0.0.1, 0.0.0.0 or ::") \
                from None
        except OSError as exc:
            why = "ports below 1024 need root" if exc.errno == errno.EACCES else \
                "another process listens there" if exc.errno == errno.EADDRINUSE else \
                "is the address this host's?"
            raise MltcpError(f"cannot serve /metrics on {addr} port {port}: {exc.strerror} "
                             f"({why}); choose another --metrics-port or --metrics-addr") \
                from None
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="mltcp-http")
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

"""Prometheus exposition (prometheus_client) and the agent's HTTP endpoints, without a
kernel: the collector's input is a JobStatus list, as telemetry.collect returns it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mltcp.host import exposition, jobs, telemetry


def _status(**kw) -> telemetry.JobStatus:
    base = dict(name="resnet", id=1, cc="cubic", budget=150 * 2**20, learning=False,
                learned_budget=0, iteration=3_000_001, bytes_in_iter=0, bytes_ratio=0.25,
                f=1.25, stale=False, last_iter_bytes=150 * 2**20, total_bytes=1_234_567_891,
                wraps=0, gaps=0, signals=0, cwnd_reductions=1_000_003)
    return telemetry.JobStatus(**{**base, **kw})


@pytest.fixture
def one_job(monkeypatch):
    monkeypatch.setattr(telemetry, "collect", lambda registry=None: [_status()])


def test_values_are_exact_and_counters_keep_moving_past_a_million(one_job, tmp_path):
    text = exposition.render(jobs.Registry(tmp_path))
    samples = {(s.name, s.labels.get("job")): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("mltcp_job_budget_bytes", "resnet")] == 157_286_400       # 150 MiB
    assert samples[("mltcp_job_acked_bytes_total", "resnet")] == 1_234_567_891
    assert samples[("mltcp_job_iterations_total", "resnet")] == 3_000_001
    assert samples[("mltcp_job_cwnd_reductions_total", "resnet")] == 1_000_003
    assert samples[("mltcp_job_f", "resnet")] == 1.25
    assert 'mltcp_job_budget_bytes{cc="cubic",job="resnet"} 1.572864e+08' in text
    assert "# TYPE mltcp_job_iterations_total counter" in text


def test_stale_fallbacks_are_a_counter_in_metrics_and_status(monkeypatch, tmp_path):
    """New connections a stale job handed the native CC (the sockops fail-safe) are counted
    per job: mltcp_job_stale_fallbacks_total, and a note in `mltcp status`."""
    stale = _status(stale=True, stale_fallbacks=7)
    monkeypatch.setattr(telemetry, "collect", lambda registry=None: [stale])
    text = exposition.render(jobs.Registry(tmp_path))
    assert "# TYPE mltcp_job_stale_fallbacks_total counter" in text
    assert 'mltcp_job_stale_fallbacks_total{cc="cubic",job="resnet"} 7.0' in text
    row = telemetry.to_table([stale]).splitlines()[1]
    assert row.endswith("stale (7 new connections ran the native cubic)")
    assert telemetry.to_json([stale])[0]["stale_fallbacks"] == 7
    assert "new connections" not in telemetry.to_table([_status()])


def test_the_endpoint_serves_metrics_health_and_a_clear_404(one_job, tmp_path):
    state = {"ok": True}
    endpoint = exposition.HttpEndpoint(
        "127.0.0.1", 0, jobs.Registry(tmp_path),
        lambda: (state["ok"], {"last_refresh_age_s": 0.1}))
    base = f"http://127.0.0.1:{endpoint.address[1]}"
    try:
        body = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
        assert 'mltcp_job_f{cc="cubic",job="resnet"} 1.25' in body
        health = json.loads(urllib.request.urlopen(f"{base}/healthz", timeout=5).read())
        assert health == {"status": "ok", "last_refresh_age_s": 0.1}
        state["ok"] = False
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{base}/healthz", timeout=5)
        assert info.value.code == 503
        assert json.loads(info.value.read())["status"] == "unhealthy"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{base}/nope", timeout=5)
        assert info.value.code == 404 and b"/healthz" in info.value.read()
    finally:
        endpoint.close()


def _flows(n: int, job: str = "resnet") -> list[telemetry.FlowStatus]:
    """``n`` flows of a job, each from its own ephemeral port: cwnd 10.., srtt 100.. us."""
    return [telemetry.FlowStatus(job=job, cc="cubic", src=f"10.0.0.1:{40000 + i}",
                                 dst="10.0.0.2:29500", cwnd=10 + i, ssthresh=1 << 30,
                                 srtt_us=100 + i, f=1.0, bytes_acked=i, cwnd_reductions=0,
                                 loss_reductions=0, age_s=0.1)
            for i in range(n)]


def _series(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


@pytest.fixture
def hundred_flows(monkeypatch):
    flows = _flows(100)
    monkeypatch.setattr(telemetry, "collect", lambda registry=None: [_status(flows=flows)])
    monkeypatch.setattr(exposition.maps, "read_health", exposition.maps.Health)
    return flows


def test_a_job_of_100_flows_is_a_bounded_set_of_series(hundred_flows, tmp_path):
    """By default a job's flows are its cwnd and srtt distribution (min, median, max), not a
    series per connection: 100 flows, 18 series on the host, as with 1 flow or 10,000."""
    series = _series(exposition.render(jobs.Registry(tmp_path)))
    assert sum(map(len, series.values())) == exposition.series_bound(1) == 18
    assert "mltcp_flow_cwnd" not in series and "mltcp_flow_srtt_seconds" not in series
    assert {k for s in sum(series.values(), []) for k in s.labels} == {"job", "cc", "quantile",
                                                                      "what"}
    cwnd = {s.labels["quantile"]: s.value for s in series["mltcp_job_flow_cwnd"]}
    srtt = {s.labels["quantile"]: s.value for s in series["mltcp_job_flow_srtt_seconds"]}
    assert cwnd == {"0": 10, "0.5": 59.5, "1": 109}
    assert srtt == pytest.approx({"0": 100e-6, "0.5": 149.5e-6, "1": 199e-6})
    assert [s.value for s in series["mltcp_job_flows"]] == [100]


def test_per_flow_series_are_opt_in_and_capped_per_job(hundred_flows, tmp_path):
    """--metrics-flows N: a series per flow, at most N per job (the same ones at every
    scrape: the first by source), the rest counted in mltcp_job_flow_series_dropped."""
    registry = jobs.Registry(tmp_path)
    series = _series(exposition.render(registry, flows_per_job=64))
    assert sum(map(len, series.values())) == exposition.series_bound(1, 64) == 18 + 2 * 64 + 1
    kept = sorted(f.src for f in hundred_flows)[:64]
    assert sorted(s.labels["src"] for s in series["mltcp_flow_cwnd"]) == kept
    assert sorted(s.labels["src"] for s in series["mltcp_flow_srtt_seconds"]) == kept
    assert [(s.labels, s.value) for s in series["mltcp_job_flow_series_dropped"]] == [
        ({"job": "resnet", "cc": "cubic"}, 36)]
    hundred_flows.reverse()                                   # another order in the map
    again = _series(exposition.render(registry, flows_per_job=64))
    assert sorted(s.labels["src"] for s in again["mltcp_flow_cwnd"]) == kept
    every = _series(exposition.render(registry, flows_per_job=1024))
    assert len(every["mltcp_flow_cwnd"]) == 100
    assert [s.value for s in every["mltcp_job_flow_series_dropped"]] == [0]


def test_a_job_without_flows_has_no_distribution(one_job, tmp_path):
    series = _series(exposition.render(jobs.Registry(tmp_path)))
    assert "mltcp_job_flow_cwnd" not in series
    assert [s.value for s in series["mltcp_job_flows"]] == [0]


def test_the_per_flow_limit_is_checked_and_the_cli_agrees(tmp_path):
    from mltcp.cli import host as cli_host
    from mltcp.core.errors import SpecError

    for bad in (0, exposition.MAX_FLOWS_PER_JOB + 1):
        with pytest.raises(SpecError, match="metrics-flows"):
            exposition.render(jobs.Registry(tmp_path), flows_per_job=bad)
    assert (cli_host.DEFAULT_FLOWS_PER_JOB, cli_host.MAX_FLOWS_PER_JOB) == (
        exposition.DEFAULT_FLOWS_PER_JOB, exposition.MAX_FLOWS_PER_JOB)
    # The most a host's scrape can hold: every job slot of the datapath in use.
    assert exposition.series_bound() == 255 * 16 + 2
    assert exposition.series_bound(flows_per_job=64) == 255 * 145 + 2

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

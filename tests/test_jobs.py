"""Job attach/detach against the real pinned maps: validation, rollback, learning, signals."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
import uuid

import pytest

from mltcp.core.aggressiveness import FP_ONE
from mltcp.core.errors import MltcpError, SpecError
from mltcp.host import datapath, jobs, maps, rules, telemetry

pytestmark = pytest.mark.kernel


@pytest.fixture
def loaded(clean_datapath):
    datapath.load(["reno", "cubic"])
    yield


@pytest.fixture
def cgroup(bpf_host):
    root = datapath.cgroup2_root()
    path = root / f"mltcp-test-{uuid.uuid4().hex[:6]}"
    path.mkdir()
    yield path
    path.rmdir()


def _cfg(job_id: int) -> maps.JobCfg:
    with maps.PinnedMap("mltcp_job_cfg") as m:
        return m.get(ctypes.c_uint32(job_id), maps.JobCfg)


def test_spec_validation_names_the_field():
    cases = [
        (dict(name="bad name!", budget=1, rules=(rules.Rule(port=1),)), "name"),
        (dict(name="j", cc="vegas", budget=1, rules=(rules.Rule(port=1),)), "cc"),
        (dict(name="j", budget=0, rules=(rules.Rule(port=1),)), "budget"),
        (dict(name="j", budget=1, slope=-1, rules=(rules.Rule(port=1),)), "slope"),
        (dict(name="j", budget=1, intercept=0, rules=(rules.Rule(port=1),)), "intercept"),
        (dict(name="j", budget=1), "cgroup"),
        (dict(name="j", budget=1, rules=("10.0.0.1:80",)), "rule"),
        (dict(name="j", budget=1, rules=tuple(rules.Rule(port=p) for p in range(1, 34))),
         "rule"),
        (dict(name="j", budget=1, gap_ms=0, rules=(rules.Rule(port=1),)), "gap_ms"),
        (dict(name="j", budget=5, learn=True, rules=(rules.Rule(port=1),)), "budget"),
    ]
    for kw, field in cases:
        with pytest.raises(SpecError) as err:
            jobs.JobSpec(**kw)
        assert err.value.field == field, kw
        assert "\n" not in str(err.value)


def test_attach_renders_the_spec_into_the_kernel_config(loaded, cgroup):
    spec = jobs.JobSpec(name="a", cc="cubic", budget=10_000_000, slope=1.5, intercept=0.75,
                        cap=2.0, gap_ms=3, stale_s=7, cgroup=str(cgroup))
    rec = jobs.attach(spec)
    cfg = _cfg(rec.id)
    assert (cfg.budget, cfg.gap_ns, cfg.stale_ns) == (10_000_000, 3_000_000, 7_000_000_000)
    assert (cfg.slope_fp, cfg.intercept_fp, cfg.cap_fp) == (int(1.5 * FP_ONE), int(0.75 * FP_ONE),
                                                            2 * FP_ONE)
    assert cfg.flags & maps.JOB_ENABLED and cfg.abi == maps.ABI_VERSION
    assert cfg.cc == maps.CC_IDS["cubic"]
    assert abs(cfg.refreshed_ns - time.monotonic_ns()) < 5e9
    links = list((maps.PIN_ROOT / "links").iterdir())
    assert [p.name for p in links] == [f"job{rec.id}-cg{cgroup.stat().st_ino}"]
    jobs.detach("a")
    assert not _cfg(rec.id).flags
    assert not (maps.PIN_ROOT / "links").exists()


def test_attach_requires_the_module_loaded(clean_datapath):
    datapath.load(["reno"])
    with pytest.raises(MltcpError, match="mltcp_dctcp is not loaded"):
        jobs.attach(jobs.JobSpec(name="x", cc="dctcp", budget=1, rules=(rules.Rule(port=9),)))
    assert jobs.Registry().read() == {}


def test_missing_cgroup_is_rejected_before_the_kernel_is_touched(loaded):
    with pytest.raises(SpecError, match="cgroup: .* is not a cgroup v2 directory"):
        jobs.attach(jobs.JobSpec(name="x", budget=1, cgroup="no-such-cgroup-here"))
    assert not (maps.PIN_ROOT / "links").exists()


def test_rule_conflict_and_duplicate_name_leave_kernel_untouched(loaded):
    jobs.attach(jobs.JobSpec(name="a", budget=1000, rules=(rules.Rule("10.0.0.1", 80),)))
    with pytest.raises(SpecError, match=r"rule: dst 10.0.0.1 \(one host\) and port 80 "
                       r"\(job 'b'\) already belongs to job 'a'; detach a or change the rule"):
        jobs.attach(jobs.JobSpec(name="b", budget=1000, rules=(rules.Rule("10.0.0.1", 80),)))
    with pytest.raises(MltcpError, match="job 'a' is already attached"):
        jobs.attach(jobs.JobSpec(name="a", budget=1000, rules=(rules.Rule("10.0.0.2", 80),)))
    assert list(jobs.Registry().read()) == ["a"]
    assert not _cfg(2).flags


def test_failed_cgroup_attach_rolls_back_rules_and_config(loaded, cgroup, monkeypatch):
    def boom(job_id, path):
        raise OSError(1, "injected attach failure")

    monkeypatch.setattr(datapath, "attach_cgroup", boom)
    spec = jobs.JobSpec(name="r", budget=1000, cgroup=str(cgroup),
                        rules=(rules.Rule("10.0.0.9", 81),))
    with pytest.raises(OSError, match="injected"):
        jobs.attach(spec)
    with maps.PinnedMap("mltcp_prefix_rules") as trie:
        assert trie.keys(maps.PrefixKey) == []
    assert not _cfg(1).flags
    assert jobs.Registry().read() == {}
    assert not (maps.PIN_ROOT / "links").exists()


def test_learning_sets_the_budget_from_stable_history(loaded):
    rec = jobs.attach(jobs.JobSpec(name="l", learn=True, rules=(rules.Rule(port=7000),)))
    key = ctypes.c_uint32(rec.id)
    with maps.PinnedMap("mltcp_job_state") as st:
        state = maps.JobState(f_fp=FP_ONE)
        samples = [19_900_000, 20_000_000, 20_100_000, 20_000_000]
        for i, s in enumerate(samples):
            state.hist[i] = s
        state.hist_len, state.hist_head = len(samples), len(samples)
        st.put(key, state)
        assert jobs.refresh() == {}  # 4 samples: not yet stable enough to trust
        state.hist[4], state.hist_len, state.hist_head = 20_050_000, 5, 5
        st.put(key, state)
    assert jobs.refresh() == {"l": 20_000_000}
    assert _cfg(rec.id).budget == 20_000_000
    assert jobs.Registry().read()["l"].learned_budget == 20_000_000


def test_signal_bumps_the_sequence(loaded):
    rec = jobs.attach(jobs.JobSpec(name="s", budget=1000, rules=(rules.Rule(port=7001),)))
    assert jobs.signal("s") == 1
    assert jobs.signal("s") == 2
    assert _cfg(rec.id).signal_seq == 2
    jobs.refresh()
    assert _cfg(rec.id).signal_seq == 2  # a refresh keeps the signal sequence


def test_a_signalling_job_has_no_gap_boundaries_from_attach_or_its_first_signal(loaded):
    """JOB_SIGNALS turns the idle-gap rule off: set at attach (``signal = True``,
    ``--signal``) or by the job's first signal, and kept by the agent's refresh."""
    declared = jobs.attach(jobs.JobSpec(name="d", budget=1000, signal=True,
                                        rules=(rules.Rule(port=7003),)))
    silent = jobs.attach(jobs.JobSpec(name="u", budget=1000, rules=(rules.Rule(port=7004),)))
    assert _cfg(declared.id).flags == maps.JOB_ENABLED | maps.JOB_SIGNALS
    assert _cfg(silent.id).flags == maps.JOB_ENABLED
    jobs.refresh()
    assert _cfg(silent.id).flags == maps.JOB_ENABLED
    jobs.signal("u")
    assert _cfg(silent.id).flags == maps.JOB_ENABLED | maps.JOB_SIGNALS
    jobs.refresh()
    assert _cfg(silent.id).flags == maps.JOB_ENABLED | maps.JOB_SIGNALS
    assert _cfg(declared.id).flags == maps.JOB_ENABLED | maps.JOB_SIGNALS
    assert jobs.Registry().read()["d"].spec.signal


def test_refresh_keeps_config_fresh_and_status_reports_stale(loaded):
    rec = jobs.attach(jobs.JobSpec(name="f", budget=1000, stale_s=1,
                                   rules=(rules.Rule(port=7002),)))
    with maps.PinnedMap("mltcp_job_cfg") as m:
        cfg = m.get(ctypes.c_uint32(rec.id), maps.JobCfg)
        cfg.refreshed_ns -= 2_000_000_000
        m.put(ctypes.c_uint32(rec.id), cfg)
    assert telemetry.collect()[0].stale
    jobs.refresh()
    assert not telemetry.collect()[0].stale


def test_cli_attach_list_status_metrics_detach(loaded):
    env = dict(os.environ)
    run = lambda *a: subprocess.run([sys.executable, "-m", "mltcp.cli", *a], capture_output=True,  # noqa: E731
                                    text=True, env=env)
    p = run("job", "attach", "tr", "--gradient-bytes", "100MB", "--workers", "4",
            "--dst", "10.1.2.3:5555", "--cc", "reno")
    assert p.returncode == 0, p.stderr
    assert "budget 150000000 B/iteration" in p.stdout
    assert "tr" in run("job", "list").stdout
    status = run("status", "--json")
    import json

    [job] = json.loads(status.stdout)
    assert (job["name"], job["budget"], job["iteration"], job["f"]) == ("tr", 150_000_000, 0, 1.0)
    metrics = run("metrics").stdout
    assert 'mltcp_job_budget_bytes{cc="reno",job="tr"} 1.5e+08' in metrics
    bad = run("job", "attach", "x", "--budget", "10MB", "--learn", "--port", "1")
    assert bad.returncode == 2 and bad.stderr.startswith("mltcp: error: budget:")
    assert run("job", "detach", "tr").returncode == 0
    assert run("job", "list").stdout.strip() == "no jobs attached"


def test_detach_of_several_jobs_takes_all_or_none(loaded):
    """`mltcp job detach a b` in one process (the hosts backend's teardown); a name that
    is not attached leaves every job attached and names itself."""
    for i, name in enumerate(("a", "b", "c")):
        jobs.attach(jobs.JobSpec(name=name, budget=1000, rules=(rules.Rule(port=7100 + i),)))
    run = lambda *a: subprocess.run([sys.executable, "-m", "mltcp.cli", *a],  # noqa: E731
                                    capture_output=True, text=True)
    bad = run("job", "detach", "c", "nosuch", "a")
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.strip() == ("mltcp: error: name: no job named 'nosuch'; "
                                  "see `mltcp job list`")
    assert sorted(jobs.Registry().read()) == ["a", "b", "c"]
    ok = run("job", "detach", "a", "b", "a")
    assert ok.returncode == 0 and ok.stdout.strip() == "detached jobs a, b", ok.stderr
    [left] = jobs.Registry().read().values()
    assert left.spec.name == "c" and [s.name for s in telemetry.collect()] == ["c"]

"""The shared trace format: validation, JSON round trip, schema check, provenance."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.common import provenance
from mltcp.lab.scenario import trace as tr
from mltcp.lab.scenario.trace import IterationRecord, JobTrace, LinkSample, LinkTrace, Trace


def sample_trace() -> Trace:
    a = JobTrace("a", ("bottleneck",), (
        IterationRecord(0, 0.0, 0.2, 0.5, 0.6, 1_000_000),
        IterationRecord(1, 0.6, 0.8, 1.1, 1.25, 1_000_000),
    ))
    b = JobTrace("b", ("bottleneck", "leaf1"), (
        IterationRecord(0, 0.0, 0.1, 0.35, 0.5, 2_000),
    ))
    link = LinkTrace("bottleneck", 1e9, (
        LinkSample(0.0, 0.0, 0, 0, 0),
        LinkSample(0.1, 9.5e8, 30_000, 4, 1),
    ))
    return Trace("two_jobs", "mltcp_cubic", "netns", 7, (a, b), (link,),
                 provenance={"git_sha": "abc", "kernel": "6.1"},
                 params={"slope": 1.0, "intercept": 1.0})


def test_json_round_trip(tmp_path: Path) -> None:
    t = sample_trace()
    path = t.save(tmp_path / "sub" / "trace.json")
    data = json.loads(path.read_text())
    assert data["schema"] == "mltcp.trace/1"
    back = tr.load_trace(path)
    assert back == t
    assert back.job("b").links == ("bottleneck", "leaf1")
    assert isinstance(back.jobs[0].iterations, tuple)
    assert Trace.from_dict(t.to_dict()) == t


def test_helpers() -> None:
    a = sample_trace().job("a")
    assert a.comm_intervals() == [(0.2, 0.5), (0.8, 1.1)]
    np.testing.assert_allclose(a.iteration_times(), [0.6, 0.65])
    with pytest.raises(SpecError) as err:
        sample_trace().job("c")
    assert err.value.field == "job" and "a, b" in str(err.value)


def test_schema_mismatch_is_an_error() -> None:
    data = sample_trace().to_dict()
    data["schema"] = "mltcp.trace/2"
    with pytest.raises(SpecError) as err:
        Trace.from_dict(data)
    assert err.value.field == "schema"
    assert "mltcp.trace/2" in str(err.value) and "mltcp.trace/1" in str(err.value)
    del data["schema"]
    with pytest.raises(SpecError, match="^schema: "):
        Trace.from_dict(data)


def test_load_rejects_non_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(SpecError) as err:              # named by its file: one of many
        tr.load_trace(path)
    assert err.value.field == str(path) and err.value.problem.startswith("is not JSON (")


@pytest.mark.parametrize(("args", "field"), [
    ((0, 1.0, 0.5, 1.5, 2.0, 10), "comm_start"),     # comm_start before start
    ((0, 0.0, 1.0, 0.5, 2.0, 10), "comm_end"),       # comm_end before comm_start
    ((0, 0.0, 0.5, 1.5, 1.0, 10), "end"),            # end before comm_end
    ((0, 0.0, 0.5, 1.0, 2.0, -1), "bytes"),
    ((-1, 0.0, 0.5, 1.0, 2.0, 1), "index"),
    ((0, float("nan"), 0.5, 1.0, 2.0, 1), "start"),
    ((0, 0.0, 0.5, 1.0, 2.0, 1, -3), "retransmits"),
    ((0, 0.0, 0.5, 1.0, 2.0, 1, 4, 1.5), "rtos"),
])
def test_iteration_record_validation_names_field(args: tuple, field: str) -> None:
    with pytest.raises(SpecError) as err:
        IterationRecord(*args)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


def test_loss_counters_are_optional_and_round_trip() -> None:
    plain = IterationRecord(0, 0.0, 0.1, 0.2, 0.2, 100)
    assert "retransmits" not in plain.to_dict()           # absent, not null: older readers
    lossy = IterationRecord(0, 0.0, 0.1, 0.2, 0.2, 100, retransmits=12, rtos=1)
    assert IterationRecord.from_dict(lossy.to_dict()) == lossy
    assert IterationRecord.from_dict(plain.to_dict()) == plain
    with pytest.raises(SpecError, match="rto"):
        IterationRecord.from_dict({**plain.to_dict(), "rto": 1})   # a typo is not ignored


def test_equal_boundaries_are_valid() -> None:
    r = IterationRecord(3, 1.0, 1.0, 1.0, 1.0, 0)     # zero-length everything is allowed
    assert r.duration == 0.0 and r.comm_duration == 0.0


def test_nested_errors_name_the_json_path() -> None:
    data = sample_trace().to_dict()
    data["jobs"][0]["iterations"][1]["comm_start"] = 0.5   # before that iteration's start 0.6
    with pytest.raises(SpecError) as err:
        Trace.from_dict(data)
    assert err.value.field == "jobs[0].iterations[1].comm_start"

    data = sample_trace().to_dict()
    data["jobs"][1]["iterations"][0]["comm_begin"] = 0.1     # a typo must not pass
    with pytest.raises(SpecError) as err:
        Trace.from_dict(data)
    assert err.value.field == "jobs[1].iterations[0].comm_begin"

    data = sample_trace().to_dict()
    del data["links"][0]["samples"][1]["drops"]
    with pytest.raises(SpecError) as err:
        Trace.from_dict(data)
    assert err.value.field == "links[0].samples[1].drops"
    assert "missing" in str(err.value)


def test_job_and_link_validation() -> None:
    rec = IterationRecord(0, 0.0, 0.1, 0.2, 0.3, 1)
    with pytest.raises(SpecError, match="^links: empty"):
        JobTrace("a", (), (rec,))
    with pytest.raises(SpecError, match=r"^iterations\[1\]\.index"):
        JobTrace("a", ("l",), (rec, rec))
    with pytest.raises(SpecError, match=r"^samples\[1\]\.ecn_marks: cumulative"):
        LinkTrace("l", 1e9, (LinkSample(0.0, 1.0, 0, 5, 0), LinkSample(0.1, 1.0, 0, 4, 0)))
    with pytest.raises(SpecError, match="^capacity_bps"):
        LinkTrace("l", 0, ())
    job = JobTrace("a", ["l"], [rec])                     # lists are accepted, stored as tuples
    assert job.links == ("l",) and job.iterations == (rec,)
    with pytest.raises(SpecError, match=r"^jobs\[1\]\.name"):
        Trace("s", "x", "fluid", 0, (job, job))
    with pytest.raises(SpecError, match="^jobs: empty"):
        Trace("s", "x", "fluid", 0, ())
    with pytest.raises(SpecError, match="^params: not JSON"):
        Trace("s", "x", "fluid", 0, (job,), params={"f": object()})


def test_provenance_keys() -> None:
    p = provenance.provenance({"ns3": "3.40", "hostname": "remote"})
    for key in ("git_sha", "git_dirty", "kernel", "hostname", "python", "mltcp", "numpy",
                "time_utc"):
        assert key in p, key
    assert isinstance(p["git_dirty"], bool)
    assert p["ns3"] == "3.40" and p["hostname"] == "remote"    # extra wins
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", p["git_sha"])
    assert p["time_utc"].endswith("+00:00")
    repo = Path(provenance.__file__).resolve().parents[3]
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False)
    top = subprocess.run(["git", "-C", str(repo), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True, check=False)
    if head.returncode == 0 and Path(top.stdout.strip()).resolve() == repo:
        assert p["git_sha"] == head.stdout.strip()
    json.dumps(p, allow_nan=False)


def test_a_process_names_the_code_it_started_with(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A long run's results name the commit it started with: HEAD is read once per
    process, so a commit (or an edit) made while it runs does not re-label them."""
    checkout = {"--show-toplevel": str(provenance._REPO_DIR), "HEAD": "a" * 40, "status": ""}

    def git(*args: str) -> str:
        return checkout[args[-1] if args[0] == "rev-parse" else args[0]]

    monkeypatch.setattr(provenance, "_git", git)
    provenance.code_state.cache_clear()
    try:
        first = provenance.provenance()
        checkout.update({"HEAD": "b" * 40, "status": " M mltcp/cli/__init__.py"})
        later = provenance.provenance()
    finally:
        provenance.code_state.cache_clear()
    assert (first["git_sha"], first["git_dirty"]) == ("a" * 40, False)
    assert (later["git_sha"], later["git_dirty"]) == ("a" * 40, False)
    assert later["time_utc"] >= first["time_utc"]


def test_communication_phases_validate_and_round_trip() -> None:
    rec = IterationRecord(0, 0.0, 1.0, 4.0, 4.5, 100, phases=((1.0, 2.0), (3.0, 4.0)))
    assert rec.comm_duration == 2.0                      # the gap 2..3 is compute
    assert rec.comm_phases() == ((1.0, 2.0), (3.0, 4.0))
    assert IterationRecord.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec
    single = IterationRecord(0, 0.0, 1.0, 4.0, 4.5, 100)
    assert "phases" not in single.to_dict() and single.comm_phases() == ((1.0, 4.0),)
    job = JobTrace("a", ("L",), (rec,))
    assert job.comm_intervals() == [(1.0, 2.0), (3.0, 4.0)]


@pytest.mark.parametrize("phases", [
    ((2.0, 3.0), (1.0, 2.0)),        # out of order
    ((0.5, 2.0),),                   # before comm_start
    ((1.0, 4.5),),                   # after comm_end
    ((1.0, 3.0), (2.0, 4.0)),        # overlapping
    ((1.0,),),                       # not a pair
    (),                              # empty
])
def test_bad_phases_name_the_field(phases: tuple) -> None:
    with pytest.raises(SpecError) as err:
        IterationRecord(0, 0.0, 1.0, 4.0, 4.5, 100, phases=phases)
    assert err.value.field.startswith("phases")


def test_flow_windows_are_optional_validated_and_round_trip() -> None:
    base = sample_trace()
    assert "flows" not in base.to_dict()         # traces without windows stay as they were
    flow = tr.FlowTrace("a/0.0", "a", "h1", "h2",
                        (tr.FlowSample(0.01, 14480), tr.FlowSample(0.02, 28960)))
    with_flows = Trace(**{**base.__dict__, "flows": (flow,)})
    assert Trace.from_dict(json.loads(json.dumps(with_flows.to_dict()))) == with_flows
    with pytest.raises(SpecError, match=r"^flows\[0\]\.job: 'zz' is not a job"):
        Trace(**{**base.__dict__, "flows": (tr.FlowTrace("z/0.0", "zz", "h1", "h2", ()),)})
    with pytest.raises(SpecError, match=r"^flows\[1\]\.id: 'a/0.0' is used twice"):
        Trace(**{**base.__dict__, "flows": (flow, flow)})
    with pytest.raises(SpecError, match=r"samples\[1\]\.t"):
        tr.FlowTrace("a/0.0", "a", "h1", "h2", (tr.FlowSample(0.02, 1), tr.FlowSample(0.01, 1)))
    doc = with_flows.to_dict()
    doc["flows"][0]["samples"][0]["cwnd_bytes"] = -1
    with pytest.raises(SpecError, match=r"^flows\[0\]\.samples\[0\]\.cwnd_bytes"):
        Trace.from_dict(doc)


def test_a_links_sample_columns_are_made_once_and_cannot_be_changed() -> None:
    # The report reads a link's samples once per iteration window of every job: the
    # columns are built once per trace (a rebuild per window made the report's cost
    # iterations x samples), and a caller cannot change them under the others.
    link = LinkTrace("l", 1e9, tuple(LinkSample(0.1 * i, 5e8 + i, 10 * i, i, 2 * i)
                                      for i in range(5)))
    t = link.column("t")
    assert t is link.times() and t is link.column("t")
    np.testing.assert_array_equal(link.column("drops"), [0, 2, 4, 6, 8])
    assert link.column("ecn_marks").dtype == np.int64
    with pytest.raises(ValueError):
        t[0] = 1.0

"""Loading a trace: what a bad sample is refused with, the round trip, the atomic save and
the one-line error naming a damaged file.

The report loads traces of hundreds of thousands of link samples, so the loader checks
the samples a column at a time; these tests pin the refusals (field path, problem and
fix, word for word) to what checking one sample object at a time said, so the fast
path cannot let through, or word differently, anything the objects refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.scenario.trace import (
    FlowSample,
    FlowTrace,
    IterationRecord,
    JobTrace,
    LinkSample,
    LinkTrace,
    Trace,
    load_trace,
)

COUNTER_FIX = ("record running totals since the run started (add back the total before a "
               "counter reset)")
NUMBER_FIX = "give a finite number of seconds/bits"
COUNT_FIX = "give a count >= 0"
KEYS = "t, throughput_bps, queue_bytes, ecn_marks, drops"


def make_trace(n: int = 8) -> Trace:
    """Two jobs, one link of ``n`` samples (t = 0.1 i, ecn_marks = i, drops = 2 i) and one
    flow of 4 window samples."""
    link = LinkTrace("L", 1e9, tuple(LinkSample(0.1 * i, 5e8 + i, 10 * i, i, 2 * i)
                                     for i in range(n)))
    a = JobTrace("a", ("L",), (IterationRecord(0, 0.0, 0.1, 0.2, 0.3, 5),
                               IterationRecord(1, 0.3, 0.4, 0.5, 0.6, 5)))
    b = JobTrace("b", ("L",), (IterationRecord(0, 0.0, 0.2, 0.4, 0.6, 7),))
    flow = FlowTrace("a/0.0", "a", "h1", "h2",
                     tuple(FlowSample(0.1 * i, 1000 + i) for i in range(4)))
    return Trace("s", "mltcp-cubic", "fluid", 3, (a, b), (link,),
                 provenance={"git_sha": "abc"}, params={"slope": 1.0}, flows=(flow,))


def refusal(data: dict) -> str:
    with pytest.raises(SpecError) as err:
        Trace.from_dict(data)
    return str(err.value)


# --------------------------------------------------------------------------- bad samples


@pytest.mark.parametrize(("kind", "i", "name", "value", "message"), [
    ("links", 3, "t", 0.05,
     "links[0].samples[3].t: 0.05 is before the previous sample's 0.2; "
     "list samples in time order"),
    ("links", 5, "drops", 3,
     f"links[0].samples[5].drops: cumulative counter fell from 8 to 3; {COUNTER_FIX}"),
    ("links", 5, "ecn_marks", 3,
     f"links[0].samples[5].ecn_marks: cumulative counter fell from 4 to 3; {COUNTER_FIX}"),
    ("links", 2, "throughput_bps", -1.0,
     "links[0].samples[2].throughput_bps: -1.0 is negative; give a rate >= 0"),
    ("links", 2, "throughput_bps", -1,
     "links[0].samples[2].throughput_bps: -1.0 is negative; give a rate >= 0"),
    ("links", 2, "t", math.nan,
     f"links[0].samples[2].t: must be a finite number (got nan); {NUMBER_FIX}"),
    ("links", 7, "t", math.inf,
     f"links[0].samples[7].t: must be a finite number (got inf); {NUMBER_FIX}"),
    ("links", 2, "throughput_bps", math.inf,
     f"links[0].samples[2].throughput_bps: must be a finite number (got inf); {NUMBER_FIX}"),
    ("links", 2, "throughput_bps", -math.inf,
     f"links[0].samples[2].throughput_bps: must be a finite number (got -inf); {NUMBER_FIX}"),
    ("links", 2, "t", 10**400,
     f"links[0].samples[2].t: must be a finite number (got {10**400}); {NUMBER_FIX}"),
    ("links", 2, "queue_bytes", 3.5,
     f"links[0].samples[2].queue_bytes: must be an integer (got 3.5); {COUNT_FIX}"),
    ("links", 2, "queue_bytes", 3.0,
     f"links[0].samples[2].queue_bytes: must be an integer (got 3.0); {COUNT_FIX}"),
    ("links", 2, "queue_bytes", -1,
     f"links[0].samples[2].queue_bytes: must be >= 0 (got -1); {COUNT_FIX}"),
    ("links", 2, "drops", True,
     f"links[0].samples[2].drops: must be an integer (got True); {COUNT_FIX}"),
    ("links", 0, "t", False,
     f"links[0].samples[0].t: must be a finite number (got False); {NUMBER_FIX}"),
    ("links", 2, "throughput_bps", True,
     f"links[0].samples[2].throughput_bps: must be a finite number (got True); {NUMBER_FIX}"),
    ("links", 2, "t", "0.2",
     f"links[0].samples[2].t: must be a finite number (got '0.2'); {NUMBER_FIX}"),
    ("links", 2, "ecn_marks", None,
     f"links[0].samples[2].ecn_marks: must be an integer (got None); {COUNT_FIX}"),
    ("links", 2, "ecn_marks", "3",
     f"links[0].samples[2].ecn_marks: must be an integer (got '3'); {COUNT_FIX}"),
    ("links", 2, "drops", [4],
     f"links[0].samples[2].drops: must be an integer (got [4]); {COUNT_FIX}"),
    ("links", 2, "drops", np.int64(4),
     f"links[0].samples[2].drops: must be an integer (got {np.int64(4)!r}); {COUNT_FIX}"),
    ("flows", 2, "t", 0.05,
     "flows[0].samples[2].t: 0.05 is before the previous sample's 0.1; "
     "list samples in time order"),
    ("flows", 1, "cwnd_bytes", True,
     f"flows[0].samples[1].cwnd_bytes: must be an integer (got True); {COUNT_FIX}"),
    ("flows", 1, "cwnd_bytes", -4,
     f"flows[0].samples[1].cwnd_bytes: must be >= 0 (got -4); {COUNT_FIX}"),
    ("flows", 1, "cwnd_bytes", 1.5,
     f"flows[0].samples[1].cwnd_bytes: must be an integer (got 1.5); {COUNT_FIX}"),
    ("flows", 1, "t", math.nan,
     f"flows[0].samples[1].t: must be a finite number (got nan); {NUMBER_FIX}"),
])
def test_a_bad_sample_is_refused_naming_its_json_path(kind: str, i: int, name: str,
                                                      value: Any, message: str) -> None:
    data = make_trace().to_dict()
    data[kind][0]["samples"][i][name] = value
    assert refusal(data) == message


def test_a_bad_sample_is_refused_through_a_saved_file_too(tmp_path: Path) -> None:
    # NaN and Infinity are not strict JSON, but Python's reader takes them: still refused.
    path = make_trace().save(tmp_path / "trace.json")
    text = path.read_text().replace('"t": 0.2,', '"t": NaN,', 1)
    assert "NaN" in text
    path.write_text(text)
    with pytest.raises(SpecError, match=r"samples\[2\]\.t: must be a finite number \(got nan\)"):
        load_trace(path)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda s: s[3].pop("t"),
     f"links[0].samples[3].t: missing; add 't' (keys: {KEYS})"),
    (lambda s: s[3].update(x=1),
     "links[0].samples[3].x: unknown key; remove it or put it in provenance/params "
     f"(keys: {KEYS})"),
    (lambda s: s.__setitem__(3, [0.3, 5e8, 30, 3, 6]),
     f"links[0].samples[3]: list is not a JSON object; give an object with keys {KEYS}"),
    (lambda s: s.__setitem__(3, None),
     f"links[0].samples[3]: NoneType is not a JSON object; give an object with keys {KEYS}"),
])
def test_a_malformed_sample_object_is_refused_naming_its_json_path(edit, message: str) -> None:
    data = make_trace().to_dict()
    edit(data["links"][0]["samples"])
    assert refusal(data) == message


def test_samples_that_are_not_an_array_are_refused() -> None:
    data = make_trace().to_dict()
    data["links"][0]["samples"] = {"t": 0.0}
    assert refusal(data) == "links[0].samples: dict is not a list; give a JSON array"


def test_a_bad_field_is_named_before_any_order_problem_and_order_problems_in_order() -> None:
    # Every sample's own fields are checked before the samples against each other; among
    # several order problems the first sample's is named, at one sample t then ecn then drops.
    data = make_trace().to_dict()
    samples = data["links"][0]["samples"]
    samples[2]["t"] = 0.01                       # out of order at 2 ...
    samples[5]["drops"] = -1                     # ... but a bad count at 5 comes first
    assert refusal(data) == (f"links[0].samples[5].drops: must be >= 0 (got -1); "
                             f"{COUNT_FIX}")
    data = make_trace().to_dict()
    samples = data["links"][0]["samples"]
    samples[4].update(t=0.01, ecn_marks=0, drops=0)
    samples[6].update(t=0.0)
    assert refusal(data) == ("links[0].samples[4].t: 0.01 is before the previous sample's "
                             "0.30000000000000004; list samples in time order")
    data = make_trace().to_dict()
    data["links"][0]["samples"][4].update(ecn_marks=0, drops=0)
    assert refusal(data) == (f"links[0].samples[4].ecn_marks: cumulative counter fell from "
                             f"3 to 0; {COUNTER_FIX}")


def test_equal_times_and_flat_counters_are_valid() -> None:
    data = make_trace().to_dict()
    for s in data["links"][0]["samples"]:
        s.update(t=1.0, ecn_marks=7, drops=0)
    link = Trace.from_dict(data).links[0]
    assert [s.t for s in link.samples] == [1.0] * 8


def test_samples_built_directly_are_checked_the_same_way() -> None:
    good = [LinkSample(0.1 * i, 1.0, 0, i, i) for i in range(4)]
    with pytest.raises(SpecError) as err:
        LinkTrace("l", 1e9, (*good[:2], LinkSample(0.05, 1.0, 0, 2, 2), good[3]))
    assert str(err.value) == ("samples[2].t: 0.05 is before the previous sample's 0.1; "
                              "list samples in time order")
    with pytest.raises(SpecError) as err:
        LinkTrace("l", 1e9, (*good[:3], LinkSample(0.3, 1.0, 0, 3, 1)))
    assert str(err.value) == f"samples[3].drops: cumulative counter fell from 2 to 1; {COUNTER_FIX}"
    with pytest.raises(SpecError) as err:
        LinkTrace("l", 1e9, (good[0], {"t": 0.1}))
    assert str(err.value) == ("samples[1]: dict is not a LinkSample; "
                              "build it with LinkSample(...)")
    with pytest.raises(SpecError) as err:
        FlowTrace("f", "a", "h1", "h2", (FlowSample(0.2, 1), FlowSample(0.1, 1)))
    assert str(err.value) == ("samples[1].t: 0.1 is before the previous sample's 0.2; "
                              "list samples in time order")


ORDER_FIX = "times must satisfy start <= comm_start <= comm_end <= end (seconds since t0)"


@pytest.mark.parametrize(("name", "value", "message"), [
    ("comm_start", 0.2, f"comm_start: 0.2 is before start 0.3; {ORDER_FIX}"),
    ("comm_end", 0.35, f"comm_end: 0.35 is before comm_start 0.4; {ORDER_FIX}"),
    ("end", 0.45, f"end: 0.45 is before comm_end 0.5; {ORDER_FIX}"),
    ("bytes", -1, f"bytes: must be >= 0 (got -1); {COUNT_FIX}"),
    ("bytes", 1.5, f"bytes: must be an integer (got 1.5); {COUNT_FIX}"),
    ("bytes", True, f"bytes: must be an integer (got True); {COUNT_FIX}"),
    ("index", -1, f"index: must be >= 0 (got -1); {COUNT_FIX}"),
    ("index", True, f"index: must be an integer (got True); {COUNT_FIX}"),
    ("start", math.nan, f"start: must be a finite number (got nan); {NUMBER_FIX}"),
    ("start", "0.3", f"start: must be a finite number (got '0.3'); {NUMBER_FIX}"),
    ("end", None, f"end: must be a finite number (got None); {NUMBER_FIX}"),
    ("end", 10**400, f"end: must be a finite number (got {10**400}); {NUMBER_FIX}"),
    ("retransmits", -3, f"retransmits: must be >= 0 (got -3); {COUNT_FIX}"),
    ("rtos", 1.5, f"rtos: must be an integer (got 1.5); {COUNT_FIX}"),
    ("phases", [[0.45, 0.5], [0.4, 0.45]],
     "phases[1]: [0.4, 0.45] is out of order or outside [0.4, 0.5]; list each communication "
     "phase as [start, end], in time order, without overlaps, within [comm_start, comm_end]"),
    ("index", 0, "index: 0 does not follow 0; list iterations in order with strictly "
     "increasing indices"),
    ("start", -0.1, "start: -0.1 is before the previous iteration's start 0.0; list "
     "iterations in time order"),
])
def test_a_bad_iteration_is_refused_naming_its_json_path(name: str, value: Any,
                                                         message: str) -> None:
    data = make_trace().to_dict()
    data["jobs"][0]["iterations"][1][name] = value
    assert refusal(data) == f"jobs[0].iterations[1].{message}"


@pytest.mark.parametrize(("edit", "message"), [
    (lambda its: its[1].pop("end"),
     "jobs[0].iterations[1].end: missing; add 'end' (keys: index, start, comm_start, "
     "comm_end, end, bytes)"),
    (lambda its: its[1].update(comm_begin=0.1),
     "jobs[0].iterations[1].comm_begin: unknown key; remove it or put it in provenance/params "
     "(keys: index, start, comm_start, comm_end, end, bytes, retransmits, rtos, phases)"),
    (lambda its: its.__setitem__(0, "i0"),
     "jobs[0].iterations[0]: str is not a JSON object; give an object with keys index, "
     "start, comm_start, comm_end, end, bytes"),
    (lambda its: its.__setitem__(0, its[1]),      # a repeated record: index 1 then 1
     "jobs[0].iterations[1].index: 1 does not follow 1; list iterations in order with "
     "strictly increasing indices"),
])
def test_a_malformed_iteration_is_refused_naming_its_json_path(edit, message: str) -> None:
    data = make_trace().to_dict()
    edit(data["jobs"][0]["iterations"])
    assert refusal(data) == message


def test_a_bad_iteration_field_is_named_before_an_order_problem() -> None:
    data = make_trace().to_dict()
    its = data["jobs"][0]["iterations"]
    its.append({**its[1], "index": 2, "start": 0.6, "comm_start": 0.7, "comm_end": 0.8,
                "end": 0.9})
    its[1]["index"] = 0                         # out of order at 1 ...
    its[2]["bytes"] = -5                        # ... but a bad count at 2 comes first
    assert refusal(data) == f"jobs[0].iterations[2].bytes: must be >= 0 (got -5); {COUNT_FIX}"


def test_iterations_with_optional_fields_and_int_times_load_as_before() -> None:
    data = make_trace().to_dict()
    its = data["jobs"][0]["iterations"]
    its[0].update(start=0, comm_start=0, end=1, comm_end=1)
    its[1].update(start=1, comm_start=1.5, comm_end=2, end=2, retransmits=3, rtos=0,
                  phases=[[1.5, 1.75], [1.8, 2]])
    a = Trace.from_dict(data).jobs[0]
    assert a.iterations == (IterationRecord(0, 0.0, 0.0, 1.0, 1.0, 5),
                            IterationRecord(1, 1.0, 1.5, 2.0, 2.0, 5, retransmits=3, rtos=0,
                                            phases=((1.5, 1.75), (1.8, 2.0))))
    assert all(type(getattr(r, n)) is float for r in a.iterations
               for n in ("start", "comm_start", "comm_end", "end"))
    assert type(a.iterations[0].index) is int and a.iterations[0].retransmits is None
    assert isinstance(a.iterations, tuple) and a.iterations[1].phases == ((1.5, 1.75),
                                                                         (1.8, 2.0))


# --------------------------------------------------------------------------- the same refusals


BAD_VALUES: tuple[Any, ...] = (math.nan, math.inf, -math.inf, -1, -0.5, True, False, 2.5, "1",
                               None, [1], 10**400, 2**64)


def one_by_one(kind: str, items: list) -> str | None:
    """What checking one sample object at a time, as the loader did before its columns,
    says of a link's (``kind`` "link") or a job's ("job") JSON samples: the reference."""
    cls = LinkSample if kind == "link" else IterationRecord
    objs = []
    for i, item in enumerate(items):
        try:
            objs.append(cls.from_dict(item))
        except SpecError as err:
            where = f"[{i}].{err.field}" if err.field else f"[{i}]"
            return f"{where}: {err.problem}; {err.fix}"
    for i, (a, b) in enumerate(zip(objs, objs[1:], strict=False), start=1):
        if kind == "job":
            if b.index <= a.index:
                return (f"[{i}].index: {b.index} does not follow {a.index}; list iterations "
                        "in order with strictly increasing indices")
            if b.start < a.start:
                return (f"[{i}].start: {b.start} is before the previous iteration's start "
                        f"{a.start}; list iterations in time order")
            continue
        if b.t < a.t:
            return (f"[{i}].t: {b.t} is before the previous sample's {a.t}; list samples "
                    "in time order")
        for name in ("ecn_marks", "drops"):
            if getattr(b, name) < getattr(a, name):
                return (f"[{i}].{name}: cumulative counter fell from {getattr(a, name)} to "
                        f"{getattr(b, name)}; {COUNTER_FIX}")
    return None


@pytest.mark.parametrize("seed", range(40))
def test_damaged_samples_are_refused_as_one_by_one_refused_them(seed: int) -> None:
    # Random damage (a bad value, a swapped pair, a missing or extra key, a non-object)
    # at random places: the loader names the same sample, field, problem and fix as
    # checking one object at a time did, or loads the same samples.
    rng = np.random.default_rng(seed)
    for _ in range(10):
        trace = make_trace(30).to_dict()
        kind = "link" if rng.random() < 0.6 else "job"
        items = (trace["links"][0]["samples"] if kind == "link"
                 else trace["jobs"][0]["iterations"])
        if kind == "job":
            items.extend({"index": k, "start": 0.6 + k, "comm_start": 0.8 + k,
                          "comm_end": 0.9 + k, "end": 1.0 + k, "bytes": 5}
                         for k in range(2, 30))
        names = sorted(items[0])
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(items)))
            name = str(rng.choice(names))
            what = rng.choice(5, p=[0.5, 0.25, 0.1, 0.08, 0.07])
            if not isinstance(items[i], dict):
                continue
            if what == 0:
                items[i][name] = BAD_VALUES[int(rng.integers(len(BAD_VALUES)))]
            elif what == 1 and i and isinstance(items[i - 1], dict):
                items[i][name], items[i - 1][name] = (items[i - 1].get(name),
                                                      items[i].get(name))
            elif what == 2:
                items[i].pop(name, None)
            elif what == 3:
                items[i]["extra"] = 1
            else:
                items[i] = [items[i]]
        expected = one_by_one(kind, items)
        prefix = "links[0].samples" if kind == "link" else "jobs[0].iterations"
        if expected is None:
            back = Trace.from_dict(trace)
            got = back.links[0].samples if kind == "link" else back.jobs[0].iterations
            assert tuple(got) == tuple(
                (LinkSample if kind == "link" else IterationRecord).from_dict(x) for x in items)
        else:
            assert refusal(trace) == prefix + expected


def test_a_count_beyond_64_bits_is_refused() -> None:
    # The metrics read counts as 64-bit columns: such a trace used to load, then break
    # the report with an OverflowError naming nothing.
    data = make_trace().to_dict()
    data["links"][0]["samples"][7]["drops"] = 2**63
    assert refusal(data) == (f"links[0].samples[7].drops: must be < 2**63 (got {2**63}); "
                             "give a count >= 0 that fits in 64 bits")
    with pytest.raises(SpecError, match=r"^cwnd_bytes: must be < 2\*\*63"):
        FlowSample(0.0, 2**64)


# --------------------------------------------------------------------------- what loads


def test_numbers_load_as_floats_and_counts_as_ints() -> None:
    data = make_trace().to_dict()
    data["links"][0]["samples"][1].update(t=1, throughput_bps=7)     # ints are numbers
    data["links"][0]["samples"][2].update(t=np.float64(1.5))         # a float subclass too
    for s in data["links"][0]["samples"][3:]:
        s["t"] += 2
    link = Trace.from_dict(data).links[0]
    s1 = link.samples[1]
    assert (s1.t, s1.throughput_bps) == (1.0, 7.0)
    assert type(s1.t) is float and type(s1.throughput_bps) is float
    assert all(type(getattr(s, n)) is int for s in link.samples
               for n in ("queue_bytes", "ecn_marks", "drops"))
    assert link.samples[2].t == 1.5 and type(link.samples[2].t) is float
    assert link.column("t").dtype == np.float64 and link.column("drops").dtype == np.int64


def test_json_round_trip_with_link_and_flow_samples(tmp_path: Path) -> None:
    t = make_trace(50)
    path = t.save(tmp_path / "runs" / "trace.json")
    back = load_trace(path)
    assert back == t and Trace.from_dict(t.to_dict()) == t
    assert back.to_dict() == t.to_dict()
    assert back.save(tmp_path / "again.json").read_bytes() == path.read_bytes()
    link, flow = back.links[0], back.flows[0]
    assert len(link.samples) == 50 and link.samples
    assert link.samples[0] == LinkSample(0.0, 5e8, 0, 0, 0)
    assert link.samples[-1] == LinkSample(0.1 * 49, 5e8 + 49, 490, 49, 98)
    assert tuple(link.samples) == t.links[0].samples
    assert link.samples == tuple(LinkSample(0.1 * i, 5e8 + i, 10 * i, i, 2 * i)
                                 for i in range(50))
    assert list(link.samples[1:3]) == [LinkSample(0.1, 5e8 + 1, 10, 1, 2),
                                       LinkSample(0.2, 5e8 + 2, 20, 2, 4)]
    assert [s.cwnd_bytes for s in flow.samples] == [1000, 1001, 1002, 1003]
    assert flow.samples == t.flows[0].samples
    np.testing.assert_array_equal(link.column("ecn_marks"), np.arange(50))
    assert hash(back.links[0]) == hash(t.links[0])


def test_a_link_without_samples_round_trips() -> None:
    t = make_trace(0)
    back = Trace.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back == t and not back.links[0].samples and len(back.links[0].samples) == 0
    assert back.links[0].column("t").shape == (0,)


def test_samples_read_like_the_tuple_they_replace() -> None:
    built = make_trace(12)
    loaded = Trace.from_dict(json.loads(json.dumps(built.to_dict())))
    for link in (built.links[0], loaded.links[0]):
        first, last = LinkSample(0.0, 5e8, 0, 0, 0), LinkSample(0.1 * 11, 5e8 + 11, 110, 11, 22)
        assert link.samples[0] == first and link.samples[np.int64(-1)] == last
        assert first in link.samples and link.samples.index(last) == 11
        assert next(reversed(link.samples)) == last and link.samples[-2:][1] == last
        assert isinstance(link.samples[2:5], tuple) and link.samples[20:] == ()
        with pytest.raises(IndexError):
            link.samples[12]
        assert link.samples != list(link.samples)           # as a tuple: not equal to a list
    assert loaded.links[0].samples == built.links[0].samples
    assert loaded.links[0] == built.links[0] and loaded.flows == built.flows
    assert "LinkSample" in repr(loaded.links[0])


def test_a_trace_survives_pickling_and_copying() -> None:
    # Traces cross process boundaries (Dask workers): their columns come back read-only.
    import copy
    import pickle

    t = Trace.from_dict(make_trace(20).to_dict())
    for back in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t)):
        assert back == t
        with pytest.raises(ValueError):
            back.links[0].column("t")[0] = 1.0


# --------------------------------------------------------------------------- saving


def test_save_leaves_no_temporary_file(tmp_path: Path) -> None:
    make_trace().save(tmp_path / "trace.json")
    make_trace(3).save(tmp_path / "trace.json")              # replaces
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]
    assert len(load_trace(tmp_path / "trace.json").links[0].samples) == 3


def test_a_save_cut_short_leaves_the_previous_trace_whole(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_trace().save(tmp_path / "trace.json")
    before = path.read_bytes()

    chunks = Trace.json_chunks

    def disk_full(self: Trace):  # type: ignore[no-untyped-def]
        written = list(chunks(self))
        yield from written[: len(written) // 2]     # half written, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Trace, "json_chunks", disk_full)
    with pytest.raises(OSError, match="No space"):
        make_trace(40).save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]
    assert load_trace(path) == make_trace()


# --------------------------------------------------------------------------- damaged files


def test_a_truncated_trace_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = make_trace().save(tmp_path / "traces" / "cubic-seed0.json")
    path.write_text(path.read_text()[:200])
    with pytest.raises(SpecError) as err:
        load_trace(path)
    assert err.value.field == str(path)
    assert err.value.problem.startswith("is not JSON (")
    assert "\n" not in str(err.value)


def test_a_garbled_trace_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cubic-seed0.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SpecError) as err:
        load_trace(path)
    assert err.value.field == str(path) and "is not JSON" in err.value.problem


def test_an_unreadable_trace_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        load_trace(tmp_path / "missing.json")
    assert err.value.field == str(tmp_path / "missing.json")
    assert err.value.problem.startswith("cannot be read (")
    with pytest.raises(SpecError) as err:
        load_trace(tmp_path)                               # a directory
    assert err.value.field == str(tmp_path)


def test_an_invalid_field_names_the_file_and_its_json_path(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "cubic-seed0.json"
    data = make_trace().to_dict()
    data["jobs"][0]["iterations"][1]["comm_start"] = 0.2        # before its start 0.3
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError) as err:
        load_trace(path)
    assert err.value.field == f"{path}: jobs[0].iterations[1].comm_start"
    assert str(err.value) == (f"{path}: jobs[0].iterations[1].comm_start: 0.2 is before start "
                              "0.3; times must satisfy start <= comm_start <= comm_end <= end "
                              "(seconds since t0)")
    with pytest.raises(SpecError) as err:                       # from_dict stays path-less
        Trace.from_dict(data)
    assert err.value.field == "jobs[0].iterations[1].comm_start"

    data = make_trace().to_dict()
    data["links"][0]["samples"][5]["drops"] = 3
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError) as err:
        load_trace(path)
    assert err.value.field == f"{path}: links[0].samples[5].drops"

    path.write_text(json.dumps({**make_trace().to_dict(), "schema": "mltcp.trace/0"}))
    with pytest.raises(SpecError, match=r"cubic-seed0\.json: schema: 'mltcp\.trace/0' is not"):
        load_trace(path)
    path.write_text("[1, 2]")
    with pytest.raises(SpecError) as err:
        load_trace(path)
    assert str(err.value).startswith(f"{path}: list is not a JSON object")

"""Which links a run's trace samples (the scenario's ``record_links``), the same in every
backend, and the trace paths that let a cluster-size scenario's samples stay small: the
fluid model's samples built as columns, a trace saved a link at a time."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.scenario import footprint
from mltcp.lab.scenario.batched import fluid
from mltcp.lab.scenario.plan import resolve
from mltcp.lab.scenario.runner import plan_runs
from mltcp.lab.scenario.spec import load_scenario, parse_scenario
from mltcp.lab.scenario.trace import LinkSample, LinkTrace, load_trace
from tests.test_scenario import dumbbell, leaf_spine

FABRIC = ("leaf1-spine1:leaf1->spine1", "leaf1-spine1:spine1->leaf1",
          "leaf2-spine1:leaf2->spine1", "leaf2-spine1:spine1->leaf2")


def _links(data: dict, choice: object) -> tuple[str, ...]:
    sc = parse_scenario({**data, "record_links": choice})
    return resolve(sc, sc.schemes[0], 0).record_links


def test_the_default_records_the_fabric_links_the_jobs_cross() -> None:
    assert parse_scenario(leaf_spine()).record_links == "fabric"
    assert _links(leaf_spine(), "fabric") == FABRIC
    assert _links(dumbbell(), "fabric") == ("bottleneck:swL->swR", "bottleneck:swR->swL")


def test_crossed_all_none_and_ids() -> None:
    crossed = _links(leaf_spine(), "crossed")
    assert set(FABRIC) < set(crossed)
    assert "h1-access:h1->leaf1" in crossed and "h1-access:leaf1->h1" in crossed
    everything = _links(leaf_spine(), "all")
    assert set(crossed) <= set(everything) and len(everything) == 2 * (4 + 2)
    assert _links(leaf_spine(), "none") == ()
    # An undirected id names both directions; a directed one, itself; graph order.
    assert _links(leaf_spine(), ["leaf2-spine1", "h1-access:h1->leaf1"]) == (
        "h1-access:h1->leaf1", "leaf2-spine1:leaf2->spine1", "leaf2-spine1:spine1->leaf2")


@pytest.mark.parametrize(("value", "field", "words"), [
    ("fabrics", "record_links", "unknown choice 'fabrics'; use one of \"fabric\""),
    (3, "record_links", "must be a string or a list (got int)"),
    (["leaf1-spine9"], "record_links[0]", "'leaf1-spine9' is not a shaped link"),
    (["leaf1-spine1", 7], "record_links[1]", "7 is not a shaped link"),
    (["leaf1-spine1", "leaf1-spine1"], "record_links[1]", "is listed twice"),
])
def test_a_bad_record_links_is_refused_naming_the_field(value: object, field: str,
                                                       words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_scenario({**leaf_spine(), "record_links": value})
    assert err.value.field == field and words in str(err.value), str(err.value)


def test_the_choice_round_trips_through_to_dict() -> None:
    for choice in ("crossed", ["leaf1-spine1"]):
        sc = parse_scenario({**leaf_spine(), "record_links": choice})
        assert parse_scenario(sc.to_dict()) == sc


def test_a_dedicated_run_records_what_the_shared_runs_record() -> None:
    sc = load_scenario("leaf-spine")
    plans = plan_runs(sc, [0], dedicated=True)
    assert {p.record_links for p in plans} == {FABRIC}


def test_the_fluid_trace_samples_only_the_recorded_links_with_the_same_numbers() -> None:
    sc = load_scenario("leaf-spine")
    plans = {choice: resolve(dataclasses.replace(sc, record_links=choice),
                             sc.scheme("mltcp-cubic"), 0) for choice in ("all", "fabric", "none")}
    traces = {choice: fluid.run_many([plan])[0] for choice, plan in plans.items()}
    assert [ln.id for ln in traces["fabric"].links] == list(FABRIC)
    assert traces["none"].links == ()
    every = {ln.id: ln for ln in traces["all"].links}
    for link in traces["fabric"].links:            # the rates do not depend on it
        assert link.samples == every[link.id].samples
    assert traces["none"].jobs == traces["all"].jobs
    # The footprint sizes the samples by the links recorded.
    assert footprint.sampled_links(plans["fabric"]) == 4
    assert footprint.sampled_links(plans["all"]) == 12


# --------------------------------------------------------------------------- trace paths


def test_samples_given_as_columns_equal_the_same_samples_as_objects() -> None:
    objects = LinkTrace("l", 1e9, tuple(LinkSample(0.1 * i, 5e8 + i, 3 * i, i, 2 * i)
                                        for i in range(5)))
    n = np.arange(5)
    columns = LinkTrace.of_columns("l", 1e9, t=0.1 * n, throughput_bps=5e8 + n,
                                   queue_bytes=3 * n, ecn_marks=n, drops=2 * n)
    assert columns == objects


@pytest.mark.parametrize(("name", "value", "message"), [
    ("t", np.nan, "samples[2].t: must be a finite number (got nan)"),
    ("throughput_bps", -1.0, "samples[2].throughput_bps: -1.0 is negative"),
    ("drops", -3, "samples[2].drops: must be >= 0 (got -3)"),
])
def test_a_bad_column_value_is_refused_naming_its_sample(name: str, value: float,
                                                         message: str) -> None:
    cols = {"t": np.arange(4) * 0.1, "throughput_bps": np.ones(4),
            "queue_bytes": np.zeros(4, dtype=int), "ecn_marks": np.zeros(4, dtype=int),
            "drops": np.zeros(4, dtype=int)}
    cols[name] = cols[name].copy()
    cols[name][2] = value
    with pytest.raises(SpecError) as err:
        LinkTrace.of_columns("l", 1e9, **cols)
    assert str(err.value).startswith(message), str(err.value)


def test_columns_out_of_order_or_missing_are_refused() -> None:
    with pytest.raises(SpecError, match=r"samples\[1\]\.t: 0\.0 is before"):
        LinkTrace.of_columns("l", 1e9, t=[0.5, 0.0], throughput_bps=[1.0, 1.0],
                             queue_bytes=[0, 0], ecn_marks=[0, 0], drops=[0, 0])
    with pytest.raises(SpecError, match="^samples: columns t, throughput_bps; give the "):
        LinkTrace.of_columns("l", 1e9, t=[0.5], throughput_bps=[1.0])
    with pytest.raises(SpecError, match=r"^samples\.drops: shape \(2,\)"):
        LinkTrace.of_columns("l", 1e9, t=[0.5], throughput_bps=[1.0], queue_bytes=[0],
                             ecn_marks=[0], drops=[0, 0])


def test_a_trace_saved_in_pieces_is_the_json_of_the_whole(tmp_path: Path) -> None:
    sc = load_scenario("leaf-spine")
    trace = fluid.run_many([resolve(sc, sc.scheme("cubic"), 1)])[0]
    path = trace.save(tmp_path / "t.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(trace.to_dict()))
    assert load_trace(path) == trace

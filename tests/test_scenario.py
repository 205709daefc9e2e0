"""The scenario spec: packaged examples, validation with field paths, helpers."""

from __future__ import annotations

import copy
import dataclasses
import json
import tomllib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.budget import Collective
from mltcp.core.errors import SpecError
from mltcp.lab.scenario.spec import Scenario, list_examples, load_scenario, parse_scenario

MB = 1_000_000
GOODPUT_1G = 957e6
EXAMPLES = ("compatible-pair", "incompatible-pair", "three-jobs", "leaf-spine", "dctcp-pair",
            "model-parallel", "compatible-pair-droptail", "compatible-pair-roce")


def raw_example(name: str) -> dict[str, Any]:
    """The example as tomllib reads it: the input form, with strings like "10MB"."""
    text = resources.files("mltcp.lab.scenario").joinpath("examples", f"{name}.toml").read_text()
    return tomllib.loads(text)


def dumbbell() -> dict[str, Any]:
    return raw_example("compatible-pair")


def leaf_spine() -> dict[str, Any]:
    return raw_example("leaf-spine")


# -- examples -------------------------------------------------------------------

def test_every_example_is_listed() -> None:
    assert sorted(EXAMPLES) == list_examples()


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_loads_and_round_trips(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert len(scenario.description) > 80  # says what the scenario shows
    data = scenario.to_dict()
    assert parse_scenario(data, "to_dict") == scenario
    # JSON-serialisable, and still the same scenario after a trip through JSON.
    assert parse_scenario(json.loads(json.dumps(data)), "json") == scenario


def test_load_by_path_equals_load_by_name(tmp_path: Path) -> None:
    text = resources.files("mltcp.lab.scenario").joinpath("examples", "three-jobs.toml").read_text()
    path = tmp_path / "mine.toml"
    path.write_text(text)
    assert load_scenario(path) == load_scenario(str(path)) == load_scenario("three-jobs")


def test_compatible_pair_contents() -> None:
    s = load_scenario("compatible-pair")
    assert s.seeds == (0, 1, 2, 3, 4)
    topo = s.topology
    assert (topo.kind, topo.bottleneck_mbit, topo.host_link_mbit, topo.queue_packets,
            topo.hosts, topo.ecn_threshold_bytes, topo.gso_max_segs) == (
        "dumbbell", 1000, 10000, 400, 4, 100_000, None)
    # The drop-tail variant is the same pair without marking.
    droptail = load_scenario("compatible-pair-droptail")
    assert droptail.topology == dataclasses.replace(topo, ecn_threshold_bytes=None)
    assert (droptail.jobs, droptail.schemes) == (s.jobs, s.schemes)
    # The RoCE variant is the same pair with the DCQCN tuner's schemes.
    roce = load_scenario("compatible-pair-roce")
    assert (roce.topology, roce.jobs) == (topo, s.jobs)
    assert [(x.name, x.mltcp, x.dcqcn_mode) for x in roce.schemes] == [
        ("dcqcn", False, None), ("mltcp-dcqcn", True, "timer"),
        ("mltcp-dcqcn-rates", True, "rates"), ("cassini", False, None)]
    for job in s.jobs:
        assert (job.compute_ms, job.bytes_per_worker, job.workers, job.iterations,
                job.start_offset_ms, job.connections, job.collective) == (
            120, 10 * MB, 2, 40, 0, 1, Collective.RING_ALLREDUCE)
    assert [(x.name, x.module_name, x.slope, x.intercept, x.schedule) for x in s.schemes] == [
        ("cubic", "cubic", 0.0, 1.0, "none"), ("reno", "reno", 0.0, 1.0, "none"),
        ("mltcp-cubic", "mltcp_cubic", 4.0, 1.0, "none"),
        ("mltcp-reno", "mltcp_reno", 4.0, 1.0, "none"),
        ("cassini", "cubic", 0.0, 1.0, "cassini")]


def test_dctcp_pair_and_leaf_spine_contents() -> None:
    d = load_scenario("dctcp-pair")
    assert (d.topology.ecn_threshold_bytes, d.topology.gso_max_segs) == (30000, 1)
    assert [(x.name, x.cc, x.mltcp) for x in d.schemes] == [
        ("dctcp", "dctcp", False), ("mltcp-dctcp", "dctcp", True)]
    topo = load_scenario("leaf-spine").topology
    # 2 hosts * 1000 Mbit/s / oversubscription 2.0, over one spine.
    assert (topo.kind, topo.hosts, topo.bottleneck_mbit) == ("leaf_spine", 4, 1000)
    assert [topo.leaf(h) for h in topo.host_names()] == [0, 0, 1, 1]


def test_leaf_spine_bottleneck_is_split_over_spines() -> None:
    data = leaf_spine()
    data["topology"] |= {"spines": 2, "hosts_per_leaf": 3, "leaves": 3, "oversubscription": 1.5}
    topo = parse_scenario(data).topology
    assert topo.hosts == 9
    assert topo.bottleneck_mbit == pytest.approx(3 * 1000 / 1.5 / 2)


# -- validation -------------------------------------------------------------------

Mutation = Callable[[dict[str, Any]], object]


def set_(*path: Any) -> Mutation:
    *keys, last, value = path

    def mutate(data: dict[str, Any]) -> None:
        for key in keys:
            data = data[key]
        data[last] = value
    return mutate


def del_(*path: Any) -> Mutation:
    *keys, last = path

    def mutate(data: dict[str, Any]) -> None:
        for key in keys:
            data = data[key]
        del data[last]
    return mutate


def dctcp_without_ecn(data: dict[str, Any]) -> None:
    data["topology"].pop("ecn_threshold_bytes", None)
    data["schemes"].append({"name": "dctcp", "cc": "dctcp", "mltcp": False})


BAD_DUMBBELL: list[tuple[str, Mutation, str]] = [
    ("unknown top key", set_("color", "red"), "color"),
    ("name missing", del_("name"), "name"),
    ("name uppercase", set_("name", "Pair"), "name"),
    ("name too long", set_("name", "x" * 41), "name"),
    ("description not text", set_("description", 3), "description"),
    ("seeds empty", set_("seeds", []), "seeds"),
    ("seeds not list", set_("seeds", 0), "seeds"),
    ("seed negative", set_("seeds", [0, -1]), "seeds[1]"),
    ("seed float", set_("seeds", [0.5]), "seeds[0]"),
    ("seed duplicate", set_("seeds", [3, 4, 3]), "seeds[2]"),
    ("topology missing", del_("topology"), "topology"),
    ("topology not table", set_("topology", "dumbbell"), "topology"),
    ("topology unknown key", set_("topology", "bandwidth", 1), "topology.bandwidth"),
    ("kind missing", del_("topology", "kind"), "topology.kind"),
    ("kind unknown", set_("topology", "kind", "ring"), "topology.kind"),
    ("bottleneck missing", del_("topology", "bottleneck_mbit"), "topology.bottleneck_mbit"),
    ("bottleneck zero", set_("topology", "bottleneck_mbit", 0), "topology.bottleneck_mbit"),
    ("bottleneck huge", set_("topology", "bottleneck_mbit", 40001), "topology.bottleneck_mbit"),
    ("bottleneck bool", set_("topology", "bottleneck_mbit", True), "topology.bottleneck_mbit"),
    ("bottleneck text", set_("topology", "bottleneck_mbit", "1G"), "topology.bottleneck_mbit"),
    ("host link below bottleneck", set_("topology", "host_link_mbit", 500),
     "topology.host_link_mbit"),
    ("host link huge", set_("topology", "host_link_mbit", 50000), "topology.host_link_mbit"),
    ("queue missing", del_("topology", "queue_packets"), "topology.queue_packets"),
    ("queue too small", set_("topology", "queue_packets", 9), "topology.queue_packets"),
    ("queue fractional", set_("topology", "queue_packets", 100.5), "topology.queue_packets"),
    ("gso zero", set_("topology", "gso_max_segs", 0), "topology.gso_max_segs"),
    ("gso huge", set_("topology", "gso_max_segs", 70000), "topology.gso_max_segs"),
    ("gso text", set_("topology", "gso_max_segs", "off"), "topology.gso_max_segs"),
    ("rto_min zero", set_("topology", "rto_min_ms", 0), "topology.rto_min_ms"),
    ("rto_min above default", set_("topology", "rto_min_ms", 500), "topology.rto_min_ms"),
    ("mtu below IPv6 minimum", set_("topology", "mtu_bytes", 576), "topology.mtu_bytes"),
    ("mtu above jumbo", set_("topology", "mtu_bytes", 9216), "topology.mtu_bytes"),
    ("ecn too small", set_("topology", "ecn_threshold_bytes", 1499),
     "topology.ecn_threshold_bytes"),
    ("ecn >= queue", set_("topology", "ecn_threshold_bytes", 400 * 1514),
     "topology.ecn_threshold_bytes"),
    ("ecn not size", set_("topology", "ecn_threshold_bytes", "lots"),
     "topology.ecn_threshold_bytes"),
    ("dctcp without ecn", dctcp_without_ecn, "topology.ecn_threshold_bytes"),
    ("hosts missing", del_("topology", "hosts"), "topology.hosts"),
    ("hosts one", set_("topology", "hosts", 1), "topology.hosts"),
    ("leaves on dumbbell", set_("topology", "leaves", 2), "topology.leaves"),
    ("oversubscription on dumbbell", set_("topology", "oversubscription", 2.0),
     "topology.oversubscription"),
    ("jobs missing", del_("jobs"), "jobs"),
    ("jobs empty", set_("jobs", []), "jobs"),
    ("jobs not array", set_("jobs", {"name": "a"}), "jobs"),
    ("job not table", set_("jobs", 1, "b"), "jobs[1]"),
    ("job unknown key", set_("jobs", 0, "gpus", 8), "jobs[0].gpus"),
    ("job name duplicate", set_("jobs", 1, "name", "a"), "jobs[1].name"),
    ("job name bad", set_("jobs", 0, "name", "A!"), "jobs[0].name"),
    ("job name too long", set_("jobs", 0, "name", "j" * 21), "jobs[0].name"),
    ("compute missing", del_("jobs", 1, "compute_ms"), "jobs[1].compute_ms"),
    ("compute zero", set_("jobs", 1, "compute_ms", 0), "jobs[1].compute_ms"),
    ("compute negative", set_("jobs", 1, "compute_ms", -5), "jobs[1].compute_ms"),
    ("compute huge", set_("jobs", 1, "compute_ms", 600_001), "jobs[1].compute_ms"),
    ("compute text", set_("jobs", 1, "compute_ms", "200"), "jobs[1].compute_ms"),
    ("bytes missing", del_("jobs", 0, "bytes_per_iteration"), "jobs[0].bytes_per_iteration"),
    ("bytes unparsable", set_("jobs", 0, "bytes_per_iteration", "ten MB"),
     "jobs[0].bytes_per_iteration"),
    ("bytes zero", set_("jobs", 0, "bytes_per_iteration", 0), "jobs[0].bytes_per_iteration"),
    ("bytes over 1 TiB", set_("jobs", 0, "bytes_per_iteration", "2TiB"),
     "jobs[0].bytes_per_iteration"),
    ("bytes float", set_("jobs", 0, "bytes_per_iteration", 1.5e6), "jobs[0].bytes_per_iteration"),
    ("workers one", set_("jobs", 0, "workers", 1), "jobs[0].workers"),
    ("workers over hosts", set_("jobs", 0, "workers", 5), "jobs[0].workers"),
    ("placement length", set_("jobs", 0, "placement", ["h1"]), "jobs[0].placement"),
    ("placement not list", set_("jobs", 0, "placement", "h1,h3"), "jobs[0].placement"),
    ("placement unknown host", set_("jobs", 0, "placement", ["h1", "h9"]),
     "jobs[0].placement[1]"),
    ("placement duplicate host", set_("jobs", 0, "placement", ["h3", "h3"]),
     "jobs[0].placement[1]"),
    ("placement one side", set_("jobs", 1, "placement", ["h3", "h4"]), "jobs[1].placement"),
    ("connections zero", set_("jobs", 0, "connections", 0), "jobs[0].connections"),
    ("connections 17", set_("jobs", 0, "connections", 17), "jobs[0].connections"),
    ("offset negative", set_("jobs", 0, "start_offset_ms", -1), "jobs[0].start_offset_ms"),
    ("iterations missing", del_("jobs", 0, "iterations"), "jobs[0].iterations"),
    ("iterations zero", set_("jobs", 0, "iterations", 0), "jobs[0].iterations"),
    ("iterations 10001", set_("jobs", 0, "iterations", 10_001), "jobs[0].iterations"),
    ("collective unknown", set_("jobs", 1, "collective", "butterfly"), "jobs[1].collective"),
    ("schemes missing", del_("schemes"), "schemes"),
    ("schemes empty", set_("schemes", []), "schemes"),
    ("scheme unknown key", set_("schemes", 2, "gain", 2), "schemes[2].gain"),
    ("scheme name duplicate", set_("schemes", 3, "name", "cubic"), "schemes[3].name"),
    ("scheme name reserved", set_("schemes", 0, "name", "dedicated"), "schemes[0].name"),
    ("scheme name bad", set_("schemes", 0, "name", "Cubic"), "schemes[0].name"),
    ("cc unknown", set_("schemes", 1, "cc", "bbr"), "schemes[1].cc"),
    ("cc missing", del_("schemes", 1, "cc"), "schemes[1].cc"),
    ("mltcp missing", del_("schemes", 2, "mltcp"), "schemes[2].mltcp"),
    ("mltcp not bool", set_("schemes", 2, "mltcp", "yes"), "schemes[2].mltcp"),
    ("slope without mltcp", set_("schemes", 0, "slope", 1.0), "schemes[0].slope"),
    ("cap without mltcp", set_("schemes", 1, "cap", 2.0), "schemes[1].cap"),
    ("slope negative", set_("schemes", 2, "slope", -1.0), "schemes[2].slope"),
    ("slope bool", set_("schemes", 2, "slope", True), "schemes[2].slope"),
    ("intercept zero", set_("schemes", 3, "intercept", 0.0), "schemes[3].intercept"),
    ("cap below intercept", set_("schemes", 3, "cap", 0.5), "schemes[3].cap"),
    ("dcqcn mode without mltcp", set_("schemes", 0, "dcqcn_mode", "timer"),
     "schemes[0].dcqcn_mode"),
    ("dcqcn mode unknown", set_("schemes", 2, "dcqcn_mode", "fast"), "schemes[2].dcqcn_mode"),
]

BAD_LEAF_SPINE: list[tuple[str, Mutation, str]] = [
    ("bottleneck given", set_("topology", "bottleneck_mbit", 1000), "topology.bottleneck_mbit"),
    ("hosts given", set_("topology", "hosts", 4), "topology.hosts"),
    ("host link missing", del_("topology", "host_link_mbit"), "topology.host_link_mbit"),
    ("one leaf", set_("topology", "leaves", 1), "topology.leaves"),
    ("no spine", set_("topology", "spines", 0), "topology.spines"),
    ("no hosts per leaf", set_("topology", "hosts_per_leaf", 0), "topology.hosts_per_leaf"),
    ("oversubscription below 1", set_("topology", "oversubscription", 0.5),
     "topology.oversubscription"),
    ("oversubscription missing", del_("topology", "oversubscription"),
     "topology.oversubscription"),
    ("links over 40G",  # 2 hosts * 40000 / 1.0 / 1 spine = 80000 Mbit/s per uplink
     lambda d: d["topology"].update(host_link_mbit=40000, oversubscription=1.0),
     "topology.oversubscription"),
    ("placement under one leaf", set_("jobs", 0, "placement", ["h1", "h2"]),
     "jobs[0].placement"),
]


def assert_spec_error(data: dict[str, Any], field: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        parse_scenario(data, "bad.toml")
    err = caught.value
    assert err.field == field, str(err)
    message = str(err)
    assert "\n" not in message and message.startswith(f"{field}: ")
    assert "(in bad.toml)" in err.problem
    assert err.fix and "--" not in err.fix
    return err


@pytest.mark.parametrize(
    ("mutate", "field"), [case[1:] for case in BAD_DUMBBELL], ids=[c[0] for c in BAD_DUMBBELL]
)
def test_bad_dumbbell_spec_names_the_field(mutate: Mutation, field: str) -> None:
    data = dumbbell()
    parse_scenario(copy.deepcopy(data))  # the base is valid; only the mutation breaks it
    mutate(data)
    assert_spec_error(data, field)


@pytest.mark.parametrize(
    ("mutate", "field"), [case[1:] for case in BAD_LEAF_SPINE],
    ids=[c[0] for c in BAD_LEAF_SPINE],
)
def test_bad_leaf_spine_spec_names_the_field(mutate: Mutation, field: str) -> None:
    data = leaf_spine()
    parse_scenario(copy.deepcopy(data))
    mutate(data)
    assert_spec_error(data, field)


def _phases(*pairs: tuple[float, float]) -> list[dict[str, float]]:
    return [{"compute_ms": c, "share": x} for c, x in pairs]


def test_model_parallel_phases() -> None:
    sc = load_scenario("model-parallel")
    job = sc.job("a")
    assert [(p.compute_ms, p.share) for p in job.phase_list()] == [(60, 0.5), (60, 0.5)]
    assert job.compute_ms == 120           # the phases' total
    single = load_scenario("compatible-pair").job("a")
    assert [(p.compute_ms, p.share) for p in single.phase_list()] == [(120, 1.0)]


def _with_phases(phases: object, keep_compute: bool = False) -> dict[str, Any]:
    data = dumbbell()
    if not keep_compute:
        del data["jobs"][0]["compute_ms"]
    data["jobs"][0]["phases"] = phases
    return data


@pytest.mark.parametrize(("phases", "keep_compute", "field"), [
    (_phases((40, 0.5), (60, 0.5)), True, "jobs[0].compute_ms"),
    (_phases((40, 0.5), (60, 0.4)), False, "jobs[0].phases"),
    (_phases((40, 1.0)), False, "jobs[0].phases"),
    (_phases((0, 0.5), (0, 0.5)), False, "jobs[0].phases"),
    (_phases((40, 0.5), (60, 0.0)), False, "jobs[0].phases[1].share"),
    (_phases((-1, 0.5), (60, 0.5)), False, "jobs[0].phases[0].compute_ms"),
    ([{"compute_ms": 40, "share": 0.5, "bytes": 1}, {"compute_ms": 1, "share": 0.5}], False,
     "jobs[0].phases[0].bytes"),
    ("two", False, "jobs[0].phases"),
])
def test_bad_phases_name_the_field(phases: object, keep_compute: bool, field: str) -> None:
    assert_spec_error(_with_phases(phases, keep_compute), field)


@pytest.mark.parametrize(("mutate", "field", "words"), [
    (lambda d: d["schemes"][0].update(schedule="oracle"), "schemes[0].schedule", "cassini"),
    (lambda d: d["schemes"][2].update(schedule="cassini"), "schemes[2].schedule",
     "mltcp = false"),
])
def test_bad_schedule_names_the_field(mutate: Mutation, field: str, words: str) -> None:
    data = dumbbell()
    mutate(data)
    assert words in assert_spec_error(data, field).fix


def test_unknown_key_lists_allowed_keys() -> None:
    data = dumbbell()
    data["topology"]["queue_packet"] = 100
    err = assert_spec_error(data, "topology.queue_packet")
    assert "did you mean 'queue_packets'?" in err.fix
    for key in ("kind", "host_link_mbit", "ecn_threshold_bytes", "hosts", "hosts_per_leaf"):
        assert key in err.fix


def test_one_side_placement_explains_the_bottleneck() -> None:
    data = dumbbell()
    data["jobs"][0]["placement"] = ["h1", "h2"]
    err = assert_spec_error(data, "jobs[0].placement")
    assert "left side" in err.problem and "would not share the bottleneck" in err.problem
    assert "h1..h2" in err.fix and "h3..h4" in err.fix


def test_parse_without_source_leaves_problem_alone() -> None:
    data = dumbbell()
    data["jobs"][0]["iterations"] = 0
    with pytest.raises(SpecError) as caught:
        parse_scenario(data)
    assert "(in " not in caught.value.problem


def test_optional_fields_take_their_defaults() -> None:
    data = dumbbell()
    del data["seeds"], data["description"], data["topology"]["host_link_mbit"]
    for key in ("connections", "start_offset_ms", "collective"):
        del data["jobs"][0][key]
    del data["schemes"][2]["slope"], data["schemes"][2]["intercept"]
    s = parse_scenario(data)
    assert s.seeds == (0,) and s.description == ""
    assert s.topology.host_link_mbit == 10_000
    topo = s.topology
    assert (topo.mtu_bytes, topo.frame_bytes, topo.mss_bytes) == (1500, 1514, 1448)
    assert topo.queue_bytes == topo.queue_packets * 1514
    job = s.jobs[0]
    assert (job.connections, job.start_offset_ms, job.collective) == (
        1, 0, Collective.RING_ALLREDUCE)
    assert s.schemes[2].aggressiveness == Aggressiveness()
    data["topology"]["bottleneck_mbit"] = 10_000
    assert parse_scenario(data).topology.host_link_mbit == 40_000  # 10x, capped


def test_jumbo_frames_scale_frames_segments_and_queues() -> None:
    data = dumbbell()
    data["topology"]["mtu_bytes"] = 9000
    topo = parse_scenario(data).topology
    assert (topo.frame_bytes, topo.mss_bytes) == (9014, 8948)
    assert topo.queue_bytes == topo.queue_packets * 9014
    assert topo.payload_efficiency == pytest.approx(8948 / 9014)
    assert topo.to_dict()["mtu_bytes"] == 9000
    assert "mtu_bytes" not in parse_scenario(dumbbell()).topology.to_dict()
    assert parse_scenario({**data, "topology": topo.to_dict()}).topology == topo


def test_sizes_accept_ints_and_strings() -> None:
    data = dumbbell()
    data["jobs"][0]["bytes_per_iteration"] = 4 * 2**20
    data["jobs"][1]["bytes_per_iteration"] = "4MiB"
    data["topology"]["ecn_threshold_bytes"] = "30KB"
    s = parse_scenario(data)
    assert s.jobs[0].bytes_per_worker == s.jobs[1].bytes_per_worker == 4 * 2**20
    assert s.topology.ecn_threshold_bytes == 30_000


def test_toml_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('name = "x"\n[topology\nkind = "dumbbell"\n')
    with pytest.raises(SpecError) as caught:
        load_scenario(path)
    err = caught.value
    assert err.field == "scenario"
    assert err.problem.startswith(f"{path}: ") and "line 2" in err.problem
    assert err.fix == "fix the TOML syntax"


def test_validation_error_from_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    text = resources.files("mltcp.lab.scenario").joinpath(
        "examples", "compatible-pair.toml").read_text()
    path.write_text(text.replace("compute_ms = 120", "compute_ms = 0", 1))
    with pytest.raises(SpecError) as caught:
        load_scenario(path)
    assert caught.value.field == "jobs[0].compute_ms"
    assert str(path) in caught.value.problem


def test_unknown_example_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_scenario("no-such-example")
    assert caught.value.field == "scenario" and "compatible-pair" in caught.value.fix
    with pytest.raises(SpecError) as caught:
        load_scenario(tmp_path / "absent.toml")
    assert caught.value.field == "scenario" and "no such file" in caught.value.problem


def test_side_and_leaf_refuse_the_other_kind() -> None:
    with pytest.raises(SpecError):
        load_scenario("leaf-spine").topology.side("h1")
    with pytest.raises(SpecError):
        load_scenario("compatible-pair").topology.leaf("h1")
    with pytest.raises(SpecError):
        load_scenario("compatible-pair").topology.side("h5")


# -- helpers ------------------------------------------------------------------------

@pytest.mark.parametrize(("workers", "expected"), [(2, 10 * MB), (4, 15 * MB)])
def test_comm_bytes_per_worker_ring(workers: int, expected: int) -> None:
    data = dumbbell()
    data["jobs"][0]["workers"] = workers
    job = parse_scenario(data).jobs[0]
    assert job.bytes_per_worker == 10 * MB
    assert job.comm_bytes_per_worker() == expected  # 2(N-1)/N * G


def test_comm_share_separates_compatible_from_incompatible() -> None:
    good, bad = load_scenario("compatible-pair"), load_scenario("incompatible-pair")
    assert good.comm_share("a", GOODPUT_1G) == pytest.approx(83.6 / 203.6, abs=1e-3)
    assert good.comm_share(good.jobs[1], GOODPUT_1G) < 0.5
    assert bad.comm_share("a", GOODPUT_1G) == pytest.approx(83.6 / 123.6, abs=1e-3)
    assert bad.comm_share(bad.jobs[1], GOODPUT_1G) > 0.5
    with pytest.raises(SpecError):
        good.comm_share("a", 0)
    with pytest.raises(SpecError):
        good.comm_share("z", GOODPUT_1G)


def test_with_schemes() -> None:
    s = load_scenario("compatible-pair")
    only = s.with_schemes(["mltcp-reno", "cubic"])
    assert [x.name for x in only.schemes] == ["cubic", "mltcp-reno"]  # scenario order
    assert only.jobs == s.jobs and only.topology == s.topology
    assert [x.name for x in s.with_schemes("reno").schemes] == ["reno"]
    assert len(s.schemes) == 5  # the original is unchanged
    with pytest.raises(SpecError) as caught:
        s.with_schemes(["cubic", "bbr"])
    assert caught.value.field == "schemes" and "mltcp-cubic" in caught.value.fix
    with pytest.raises(SpecError):
        s.with_schemes([])


def test_scheme_aggressiveness_and_module() -> None:
    data = dumbbell()
    data["schemes"][2] |= {"slope": 2.0, "intercept": 0.5, "cap": 2.0}
    s = parse_scenario(data)
    standard, mltcp = s.scheme("cubic"), s.scheme("mltcp-cubic")
    assert standard.aggressiveness == Aggressiveness(0.0, 1.0)
    assert standard.aggressiveness(1.0) == 1.0
    assert mltcp.aggressiveness == Aggressiveness(2.0, 0.5, 2.0)
    assert (standard.module_name, mltcp.module_name) == ("cubic", "mltcp_cubic")
    assert parse_scenario(s.to_dict()) == s
    assert mltcp.dcqcn_mode is None and "dcqcn_mode" not in mltcp.to_dict()
    data["schemes"][2]["dcqcn_mode"] = "timer"
    timer = parse_scenario(data)
    assert timer.scheme("mltcp-cubic").dcqcn_mode == "timer"
    assert parse_scenario(timer.to_dict()) == timer


def test_scenario_is_frozen() -> None:
    s: Scenario = load_scenario("compatible-pair")
    with pytest.raises(AttributeError):
        s.name = "other"  # type: ignore[misc]


def test_compute_jitter_must_not_be_negative() -> None:
    data = dumbbell()
    data["jobs"][0]["compute_jitter_ms"] = -1
    assert_spec_error(data, "jobs[0].compute_jitter_ms")


# -- real-training workloads ------------------------------------------------------------


def test_workload_sizes_the_model_for_the_hosts_backend() -> None:
    data = dumbbell()
    data["jobs"][0]["workload"] = {"model": "transformer", "batch": 2, "d_model": 256,
                                   "layers": 2, "heads": 4, "seq": 16, "vocab": 8000}
    data["jobs"][1]["workload"] = {"model": "resnet18", "image_size": 32, "signal": True}
    a, b = parse_scenario(data).jobs
    assert a.workload is not None and b.workload is not None
    assert a.workload.size == (("d_model", 256), ("layers", 2), ("heads", 4), ("seq", 16),
                               ("vocab", 8000))
    assert a.workload.to_dict()["vocab"] == 8000 and not a.workload.signal
    assert b.workload.size == (("image_size", 32),) and b.workload.signal


@pytest.mark.parametrize(("workload", "field", "words"), [
    ({"model": "resnet18", "d_model": 64}, "jobs[0].workload.d_model", "only the transformer"),
    ({"model": "transformer", "image_size": 32}, "jobs[0].workload.image_size", "only a CNN"),
    ({"model": "transformer", "d_model": 0}, "jobs[0].workload.d_model", "between 8"),
    ({"model": "transformer", "d_model": 256, "heads": 3}, "jobs[0].workload.heads",
     "does not divide"),
])
def test_bad_workload_size_names_the_field(workload: dict, field: str, words: str) -> None:
    data = dumbbell()
    data["jobs"][0]["workload"] = workload
    assert words in str(assert_spec_error(data, field))

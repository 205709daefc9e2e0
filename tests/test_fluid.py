"""The fluid model: exact answers on hand-made batches, the HotNets'24 shift equation
step by step, and the scenarios' qualitative behaviour (fair sharing keeps identical
jobs overlapped, MLTCP slides them apart, an incompatible pair cannot interleave)."""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.models import fluid_engine
from mltcp.lab.scenario import metrics, schedule
from mltcp.lab.scenario.batched import fluid
from mltcp.lab.scenario.batched.lanes import Batch, build_batch
from mltcp.lab.scenario.graph import graph_for, ring_link_ids
from mltcp.lab.scenario.plan import compute_jitter_ms, placement, resolve
from mltcp.lab.scenario.runner import run_one, traces_of
from mltcp.lab.scenario.spec import Scheme, load_scenario
from tests.interrupt import ctrl_c_when


def run_fluid(scenario, scheme, seed, only_job=None):  # type: ignore[no-untyped-def]
    return run_one("fluid", scenario, scheme, seed, only_job)

CAP = 1e6          # payload bytes/s of the hand-made link


def one_link_batch(slope: float, intercept: float, share: float, delta0: float,
                   iterations: int = 12, period: float = 1.0, lanes: int = 1) -> Batch:
    """Two identical jobs on one link; job b starts ``delta0`` after job a.  Alone, a
    job communicates ``share * period`` seconds and computes the rest."""
    nbytes = share * period * CAP

    def per_lane(x: np.ndarray) -> np.ndarray:
        return np.repeat(x[None], lanes, axis=0)

    return Batch(
        job_names=["a", "b"], link_ids=["l"], flow_job=np.array([0, 1]),
        flow_links=[((0,), (0,))] * lanes, record=np.array([0]),
        capacity=per_lane(np.array([CAP])),
        flow_bytes=per_lane(np.array([nbytes, nbytes])),
        phase_fraction=per_lane(np.ones((2, 1))),
        phase_compute=per_lane(np.full((2, 1), (1 - share) * period)),
        weight=per_lane(np.ones(2)), slope=np.full(lanes, float(slope)),
        intercept=np.full(lanes, float(intercept)), cap=np.full(lanes, np.inf),
        iterations=per_lane(np.array([iterations, iterations])),
        start=per_lane(np.array([0.0, delta0])))


# --------------------------------------------------------------------------- HotNets'24


@pytest.mark.parametrize(("slope", "intercept", "share"), [
    (1.0, 1.0, 0.4), (4.0, 1.0, 0.4), (2.0, 0.5, 0.3), (0.5, 1.0, 0.45), (8.0, 2.0, 0.25),
    (1.0, 1.0, 0.1),
])
def test_reproduces_the_hotnets_shift_equation_step_by_step(slope: float, intercept: float,
                                                             share: float) -> None:
    # F frozen between phase events (f_steps=0) is the analysis's assumption, so every
    # step must agree to rounding, not just the trend.
    result = fluid.simulate(one_link_batch(slope, intercept, share, delta0=0.01),
                            fluid.FluidOptions(f_steps=0))
    gaps = result.comm_start[0, 1] - result.comm_start[0, 0]
    a_t = share * 1.0
    steps = 0
    for now, nxt in zip(gaps, gaps[1:], strict=False):
        if now >= a_t:           # no overlap any more: the equation no longer applies
            break
        assert nxt == pytest.approx(fluid.hotnets_shift(now, a_t, slope, intercept),
                                    rel=1e-9, abs=1e-12)
        steps += 1
    assert steps >= 3
    assert gaps[1] > gaps[0]     # MLTCP widens the gap from the first overlap on


def test_hotnets_shift_fixed_points_and_domain() -> None:
    assert fluid.hotnets_shift(0.0, 0.4, 2.0, 1.0) == 0.0      # synchronized stays so
    assert fluid.hotnets_shift(0.4, 0.4, 2.0, 1.0) == 0.4      # interleaved stays so
    assert fluid.hotnets_shift(0.2, 0.4, 0.0, 1.0) == 0.2      # slope 0: fair, no drift
    with pytest.raises(SpecError, match="delta"):
        fluid.hotnets_shift(0.5, 0.4, 2.0, 1.0)


def test_fair_sharing_keeps_the_gap() -> None:
    # Slope 0, intercept 1 is max-min fair: the overlap never resolves, the gap stays.
    result = fluid.simulate(one_link_batch(0.0, 1.0, 0.4, delta0=0.05),
                            fluid.FluidOptions(f_steps=0))
    gaps = result.comm_start[0, 1] - result.comm_start[0, 0]
    assert gaps == pytest.approx(np.full_like(gaps, 0.05), abs=1e-12)
    # Both share the link during the overlap: a's phase is aT + overlap / 2 ... exactly:
    # a alone 0.05 s, then half rate until done: 0.05 + 2 * (0.4 - 0.05) = 0.75 s.
    comm_a = result.comm_end[0, 0] - result.comm_start[0, 0]
    assert comm_a[1:] == pytest.approx(np.full(len(comm_a) - 1, 0.75))


# --------------------------------------------------------------------------- rates


def test_weighted_max_min_on_a_two_link_chain() -> None:
    # Flows: x on l1, y on l1+l2, z on l2; capacities l1 = 1, l2 = 2 (bytes/s).
    # Unweighted: l1 fills first at 1/2 each (x, y); z takes the rest of l2: 1.5.
    links = [[0], [0, 1], [1]]
    cap = np.array([1.0, 2.0])
    rate = fluid_engine.weighted_max_min(np.array([1.0, 1.0, 1.0]), links, cap)
    assert rate == pytest.approx([0.5, 0.5, 1.5])
    # Weight 3 for x: l1 splits 3:1 -> x 0.75, y 0.25; z gets 1.75.
    rate = fluid_engine.weighted_max_min(np.array([3.0, 1.0, 1.0]), links, cap)
    assert rate == pytest.approx([0.75, 0.25, 1.75])
    # A flow with weight 0 (not communicating) gets nothing and frees its share.
    rate = fluid_engine.weighted_max_min(np.array([0.0, 1.0, 1.0]), links, cap)
    assert rate == pytest.approx([0.0, 1.0, 1.0])
    # Routed the other way round (another ECMP pick): x and z swap links.
    rate = fluid_engine.weighted_max_min(np.ones(3), [[1], [0, 1], [0]], cap)
    assert rate == pytest.approx([1.5, 0.5, 0.5])
    # Two links filling at the same level freeze together; a third flow takes the rest.
    rate = fluid_engine.weighted_max_min(np.ones(3), [[0], [1], [1, 2]],
                                         np.array([1.0, 2.0, 5.0]))
    assert rate == pytest.approx([1.0, 1.0, 1.0])


def test_lanes_are_independent() -> None:
    # One batch of 3 lanes with different slopes equals 3 separate single-lane runs.
    batch = one_link_batch(1.0, 1.0, 0.4, delta0=0.02, lanes=3)
    batch.slope = np.array([0.0, 1.0, 4.0])
    together = fluid.simulate(batch)
    for lane, slope in enumerate([0.0, 1.0, 4.0]):
        alone = fluid.simulate(one_link_batch(slope, 1.0, 0.4, delta0=0.02))
        np.testing.assert_allclose(together.end[lane], alone.end[0], rtol=1e-12)


def test_multi_phase_iterations_follow_their_phases() -> None:
    # One job alone, two phases per iteration: 0.1 s compute + 40 % of the bytes, then
    # 0.2 s compute + 60 %.  Iteration = 0.1 + 0.4 + 0.2 + 0.6 = 1.3 s of 1 MB at 1 MB/s.
    batch = one_link_batch(0.0, 1.0, 1.0, delta0=0.0, iterations=3)
    batch.flow_bytes = np.array([[1e6, 1e6]])
    batch.iterations = np.array([[3, 0]])
    batch.phase_fraction = np.array([[[0.4, 0.6], [0.4, 0.6]]])
    batch.phase_compute = np.array([[[0.1, 0.2], [0.1, 0.2]]])
    result = fluid.simulate(batch)
    assert result.iteration_times()[0, 0] == pytest.approx([1.3, 1.3, 1.3])
    assert result.comm_start[0, 0] == pytest.approx([0.1, 1.4, 2.7])


# --------------------------------------------------------------------------- scenarios


@pytest.mark.parametrize("mtu", [1500, 9000])
def test_dedicated_iteration_is_compute_plus_bytes_at_goodput(mtu: int) -> None:
    sc = load_scenario("compatible-pair")
    sc = dataclasses.replace(sc, topology=dataclasses.replace(sc.topology, mtu_bytes=mtu))
    job = sc.job("a")
    trace = run_fluid(sc, sc.scheme("cubic"), seed=0, only_job="a")
    assert [j.name for j in trace.jobs] == ["a"]
    # Goodput is MSS/frame of the rate: 1448/1514 at 1500 B, 8948/9014 with jumbo frames.
    goodput = sc.topology.bottleneck_mbit * 1e6 * (mtu - 52) / (mtu + 14)
    expected = job.compute_ms / 1000 + job.comm_bytes_per_worker() * 8 / goodput
    assert trace.jobs[0].iteration_times() == pytest.approx(
        np.full(job.iterations, expected), rel=1e-9)


def test_compatible_pair_interleaves_under_mltcp_not_under_fair_sharing() -> None:
    sc = load_scenario("compatible-pair")
    fair = metrics.summarize(run_fluid(sc, sc.scheme("cubic"), seed=0))
    ml = metrics.summarize(run_fluid(sc, sc.scheme("mltcp-cubic"), seed=0))
    assert fair["overall"]["convergence_iteration"] is None
    assert min(fair["jobs"]["a"]["overlap"][5:]) > 0.9
    conv = ml["overall"]["convergence_iteration"]
    assert conv is not None and conv < 20
    assert max(ml["jobs"]["a"]["overlap"][conv:]) < 0.1
    assert ml["jobs"]["a"]["mean"] < fair["jobs"]["a"]["mean"]


def test_incompatible_pair_never_interleaves() -> None:
    sc = load_scenario("incompatible-pair")
    for scheme in ("cubic", "mltcp-cubic"):
        s = metrics.summarize(run_fluid(sc, sc.scheme(scheme), seed=0))
        assert s["overall"]["convergence_iteration"] is None, scheme


def test_trace_links_and_samples_match_the_network() -> None:
    sc = load_scenario("leaf-spine")
    trace = run_fluid(sc, sc.scheme(sc.schemes[0].name), seed=1)
    graph = graph_for(sc.topology)
    places = placement(sc)
    for job in trace.jobs:
        assert list(job.links) == ring_link_ids(graph, places[job.name])
    for link in trace.links:
        assert all(s.throughput_bps <= link.capacity_bps * (1 + 1e-9) for s in link.samples)
        assert all(s.queue_bytes == 0 and s.drops == 0 for s in link.samples)
    carried = sum(s.throughput_bps for link in trace.links for s in link.samples)
    assert carried > 0


def test_seed_changes_the_start_jitter_only_slightly() -> None:
    sc = load_scenario("compatible-pair")
    one = sc.jobs[0]
    short = dataclasses.replace(sc, jobs=tuple(dataclasses.replace(j, iterations=2)
                                               for j in sc.jobs))
    a = run_fluid(short, sc.scheme("cubic"), seed=0)
    b = run_fluid(short, sc.scheme("cubic"), seed=1)
    sa, sb = a.job(one.name).iterations[0].start, b.job(one.name).iterations[0].start
    assert 0 <= sa < 0.001 and 0 <= sb < 0.001 and sa != sb


def test_bad_options_name_the_field() -> None:
    with pytest.raises(SpecError, match="f_steps"):
        fluid.FluidOptions(f_steps=-1)
    with pytest.raises(SpecError, match="sample_s"):
        fluid.FluidOptions(sample_s=0)
    batch = one_link_batch(1.0, 1.0, 0.4, 0.0)
    batch.weight = np.ones((1, 3))
    with pytest.raises(SpecError, match="batch.weight"):
        fluid.simulate(batch)


def test_runs_of_another_structure_do_not_batch() -> None:
    pair, three = load_scenario("compatible-pair"), load_scenario("three-jobs")
    cubic = Scheme("cubic", "cubic", False)
    with pytest.raises(SpecError, match="structure"):
        build_batch([resolve(pair, cubic, 0), resolve(three, cubic, 0)])


def test_model_parallel_phases_are_traced_and_interleave() -> None:
    sc = load_scenario("model-parallel")
    alone = run_fluid(sc, sc.scheme("cubic"), seed=0, only_job="a").jobs[0]
    goodput = sc.topology.bottleneck_mbit * 1e6 * sc.topology.payload_efficiency
    burst = sc.job("a").comm_bytes_per_worker() * 0.5 * 8 / goodput
    first = alone.iterations[0]
    (a0, e0), (a1, e1) = first.phases
    assert a0 == pytest.approx(first.start + 0.06) and e0 - a0 == pytest.approx(burst)
    assert a1 == pytest.approx(e0 + 0.06) and e1 - a1 == pytest.approx(burst)
    assert first.comm_duration == pytest.approx(2 * burst)
    ml = metrics.summarize(run_fluid(sc, sc.scheme("mltcp-cubic"), seed=0))
    fair = metrics.summarize(run_fluid(sc, sc.scheme("cubic"), seed=0))
    assert ml["overall"]["convergence_iteration"] is not None
    assert fair["overall"]["convergence_iteration"] is None


def _jittered(name: str, sigma: float):
    sc = load_scenario(name)
    return dataclasses.replace(sc, jobs=tuple(dataclasses.replace(j, compute_jitter_ms=sigma)
                                              for j in sc.jobs))


def test_compute_jitter_adds_the_drawn_noise_exactly() -> None:
    sc = _jittered("compatible-pair", 10.0)
    alone = run_fluid(sc, sc.scheme("cubic"), seed=4, only_job="a").job("a")
    goodput = sc.topology.bottleneck_mbit * 1e6 * sc.topology.payload_efficiency
    comm = sc.job("a").comm_bytes_per_worker() * 8 / goodput
    drawn = np.array(compute_jitter_ms(sc, 4)["a"]) / 1000
    assert alone.iteration_times() == pytest.approx(0.12 + comm + drawn, abs=1e-9)


def test_under_noise_mltcp_holds_the_interleaving_that_cassini_only_sets() -> None:
    # Cassini shifts the starts once; per-iteration noise then random-walks the phases
    # back into each other.  MLTCP pushes overlapping phases apart every iteration.
    sc = _jittered("compatible-pair", 10.0)
    plans = schedule.apply([resolve(sc, sc.scheme("cassini"), s) for s in range(5)]
                           + [resolve(sc, sc.scheme("mltcp-cubic"), s) for s in range(5)])
    traces = traces_of("fluid", plans, record_links=False)
    late = [np.mean([np.mean(metrics.overlap(t, "a")[10:]) for t in traces[k:k + 5]])
            for k in (0, 5)]
    cassini, mltcp = late
    assert mltcp < 0.15 and cassini > mltcp + 0.2, late


def test_ctrl_c_stops_a_long_fluid_run_within_a_second(tmp_path: Path) -> None:
    # Every scheme and seed of a pair for 10,000 iterations: minutes of the fluid model,
    # which says how far it is (and an ETA) and unwinds at Ctrl-C at once (the compiled
    # engine returns to Python every ~0.1 s; 5 s allowed: a busy machine).
    text = resources.files("mltcp.lab.scenario").joinpath(
        "examples", "compatible-pair.toml").read_text()
    (tmp_path / "long.toml").write_text(text.replace("iterations = 40", "iterations = 10000"))
    got = ctrl_c_when(["run", "long.toml", "--backend", "fluid", "--out", "out"], tmp_path,
                      "fluid model: ")
    assert " s simulated (of ~2036.5 s at least), ETA " in got.stderr
    assert got.returncode == 130, got.stderr
    assert got.latency_s < 5, got.latency_s
    assert got.stderr.splitlines()[-1] == "mltcp: interrupted (SIGINT)"

"""The fluid model's compiled event engine (mltcp.lab.models.fluid_engine).

It replaced a dense engine that recomputed every rate at every event; the examples'
traces must not change (tests/data holds the first engine's numbers), and what makes it
scale must hold: an event recomputes a small region of rates, yet after every event
the rates are the weighted max-min of the whole network for the flows' weights; a run
can be advanced in slices, or rebuilt mid-run, without changing its result; link
samples are the integral of the rates."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.models import fluid_engine
from mltcp.lab.scenario.batched import fluid
from mltcp.lab.scenario.batched.lanes import build_batch
from mltcp.lab.scenario.plan import resolve
from mltcp.lab.scenario.runner import plan_runs
from mltcp.lab.scenario.spec import load_scenario

FIRST_ENGINE = json.loads((Path(__file__).parent / "data"
                           / "fluid_examples_first_engine.json").read_text())
EXAMPLES = sorted(k for k in FIRST_ENGINE if not k.startswith("_"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_examples_give_what_the_first_engine_gave(name: str) -> None:
    # The first engine sampled every shaped link, as record_links = "all" does.
    sc = dataclasses.replace(load_scenario(name), record_links="all")
    plans = plan_runs(sc, sc.seeds, dedicated=True)
    traces = fluid.run_many(plans, fluid.FluidOptions(), record_links=True)
    want = FIRST_ENGINE[name]
    assert [(t.scheme, t.seed) for t in traces] == [(w["scheme"], w["seed"]) for w in want]
    for trace, w in zip(traces, want, strict=True):
        got = {}
        for job in trace.jobs:
            recs = np.array([[r.start, r.comm_end, r.end] for r in job.iterations])
            got[job.name] = [len(recs), *recs.sum(axis=0).tolist()]
        assert got.keys() == w["jobs"].keys()
        for job, values in w["jobs"].items():
            assert got[job][0] == values[0]
            assert got[job][1:] == pytest.approx(values[1:], rel=1e-11, abs=1e-9), \
                (trace.scheme, trace.seed, job)
        carried = sum(s.throughput_bps for link in trace.links for s in link.samples)
        assert carried == pytest.approx(w["link_samples_bps"], rel=1e-9)


def _state(flow_links: list[list[int]], flow_job: list[int], capacity: list[float],
           nbytes: float = 1e6, compute: float = 0.1, iterations: int = 3,
           slope: float = 0.0, sample_s: float = 0.0,
           start: list[float] | None = None) -> fluid_engine.EngineState:
    n_jobs = max(flow_job) + 1
    return fluid_engine.new_state(
        np.array(flow_job), flow_links, np.array(capacity), np.full(len(flow_job), nbytes),
        np.ones(len(flow_job)), np.ones((n_jobs, 1)), np.full((n_jobs, 1), compute),
        np.full(n_jobs, iterations), np.array(start or [0.0] * n_jobs),
        np.zeros((n_jobs, 1)), slope, 1.0, np.inf, 8, sample_s)


def test_an_event_recomputes_its_component_only() -> None:
    # Jobs a and b share link 0; job c is alone on link 1.  c's events must not touch
    # a's and b's rates (their tlast stays where their own events set it).
    st = _state([[0], [0], [1]], [0, 1, 2], [1e6, 1e6], start=[0.0, 0.0, 0.05])
    assert fluid_engine.advance_until(st, 0.12, 10_000) == fluid_engine.RUNNING
    # at 0.1 a and b start sharing link 0; at 0.15 c starts on link 1
    assert st.rate[:2] == pytest.approx([5e5, 5e5]) and st.rate[2] == 0.0
    assert st.tlast[:2] == pytest.approx([0.1, 0.1])
    fluid_engine.advance_until(st, 0.16, 10_000)
    assert st.rate[2] == pytest.approx(1e6)
    assert st.tlast[2] == pytest.approx(0.15) and st.tlast[:2] == pytest.approx([0.1, 0.1])
    assert fluid_engine.advance_until(st, np.inf, 10_000) == fluid_engine.DONE
    # shared: 2 MB at 1 MB/s; alone: 1 MB at 1 MB/s
    assert (st.end - st.start)[:2, 0] == pytest.approx([2.1, 2.1])
    assert (st.end - st.start)[2] == pytest.approx([1.1, 1.1, 1.1])


def _random_state(seed: int, n_jobs: int, n_links: int, slope: float,
                  iterations: int = 3) -> tuple[fluid_engine.EngineState, list[list[int]]]:
    """Jobs of 1-3 flows, each flow over 1-4 random links of random capacities, with
    random bytes, weights (connections), compute and start times: contention
    components of every shape, a giant one where flows are many for the links."""
    rng = np.random.default_rng(seed)
    flow_job, flow_links = [], []
    for j in range(n_jobs):
        for _ in range(int(rng.integers(1, 4))):
            flow_job.append(j)
            flow_links.append(sorted(rng.choice(n_links, size=int(rng.integers(1, 5)),
                                                replace=False).tolist()))
    n = len(flow_job)
    st = fluid_engine.new_state(
        np.array(flow_job), flow_links, rng.uniform(0.5e6, 2e6, n_links),
        rng.uniform(0.2e6, 1e6, n), rng.integers(1, 4, n).astype(float),
        np.ones((n_jobs, 1)), rng.uniform(0.01, 0.2, (n_jobs, 1)),
        np.full(n_jobs, iterations), rng.uniform(0.0, 0.5, n_jobs), np.zeros((n_jobs, 1)),
        slope, 1.0, np.inf, 8, 0.0)
    return st, flow_links


@pytest.mark.parametrize("slope", [0.0, 4.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_after_every_event_the_rates_are_the_whole_networks_max_min(
        seed: int, slope: float) -> None:
    # The engine recomputes a region per event; a recomputation of every rate with the
    # same weights (weight x F as the engine last evaluated it) must agree, event by
    # event, through starts, finishes and (slope 4: MLTCP) F marks.  What the regions
    # rest on holds too: every link's kept load is the sum of its active flows' rates,
    # and every active flow's remembered bottleneck is a full link of its own on which
    # no flow gets more per unit of weight.
    st, flow_links = _random_state(seed, n_jobs=16, n_links=12, slope=slope, iterations=8)
    checked = 0
    while fluid_engine.advance_until(st, np.inf, st.events + 1) == \
            fluid_engine.TOO_MANY_EVENTS:
        on = st.active
        want = fluid_engine.weighted_max_min(np.where(on, st.w, 0.0), flow_links,
                                             st.capacity)
        np.testing.assert_allclose(st.rate[on], want[on], rtol=1e-9, atol=1e-6)
        load = np.array([sum(st.rate[f] for f in range(len(flow_links))
                             if on[f] and k in flow_links[f]) for k in range(12)])
        np.testing.assert_allclose(st.load, load, rtol=0, atol=1e-9 * st.capacity.max())
        for f in np.flatnonzero(on):
            k = st.bneck[f]
            assert k in flow_links[f]
            assert load[k] >= st.capacity[k] * (1 - 1e-9)
            assert st.level[f] >= max(st.level[g] for g in np.flatnonzero(on)
                                      if k in flow_links[g]) * (1 - 1e-9)
        checked += int(on.any())
    assert st.events > 300 and checked > 200
    assert np.isfinite(st.end).all()


def test_a_flow_whose_bottleneck_moves_gets_the_new_one() -> None:
    # Flow a crosses links 0 (capacity 2) and 1 (3); d shares link 0 with it, c shares
    # link 1 and is held to 1.5 by link 2.  While d runs, a and d split link 0 (1 each);
    # once d is done, a's remembered bottleneck (link 0) would give it 2, which link 1
    # cannot carry beside c: a region solved over its flows' bottlenecks alone must see
    # that and give a what link 1 leaves (1.5), with link 1 as its bottleneck.
    st = fluid_engine.new_state(
        np.array([0, 1, 2]), [[0, 1], [1, 2], [0]], np.array([2e6, 3e6, 1.5e6]),
        np.array([10e6, 10e6, 1e6]), np.ones(3), np.ones((3, 1)), np.full((3, 1), 0.1),
        np.ones(3, dtype=np.int64), np.zeros(3), np.zeros((3, 1)), 0.0, 1.0, np.inf, 8,
        0.0)
    assert fluid_engine.advance_until(st, 1.0, 10_000) == fluid_engine.RUNNING
    assert st.rate == pytest.approx([1e6, 1.5e6, 1e6]) and st.bneck[0] == 0
    assert fluid_engine.advance_until(st, 1.2, 10_000) == fluid_engine.RUNNING
    assert not st.active[2]
    assert st.rate[:2] == pytest.approx([1.5e6, 1.5e6]) and st.bneck[0] == 1
    assert st.load == pytest.approx([1.5e6, 3e6, 1.5e6])


def _component_sizes(flow_links: list[list[int]]) -> list[int]:
    """Flows per connected component of the flows' link-sharing graph."""
    parent = list(range(len(flow_links)))

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    first: dict[int, int] = {}
    for f, links in enumerate(flow_links):
        for k in links:
            parent[root(f)] = root(first.setdefault(k, f))
    sizes: dict[int, int] = {}
    for f in range(len(flow_links)):
        sizes[root(f)] = sizes.get(root(f), 0) + 1
    return sorted(sizes.values(), reverse=True)


@pytest.mark.parametrize("slope", [0.0, 4.0])
def test_an_event_recomputes_a_few_rates_of_a_giant_component(slope: float) -> None:
    # 200 jobs' ~400 flows on 600 links: one contention component holds most of them.
    # A start, finish or F mark moves the rates near it only (an F mark used to
    # recompute its whole component: about half the flows, every event).
    st, flow_links = _random_state(0, n_jobs=200, n_links=600, slope=slope)
    giant = _component_sizes(flow_links)[0]
    assert giant > 0.8 * len(flow_links)
    assert fluid_engine.advance_until(st, np.inf, 10**7) == fluid_engine.DONE
    assert st.recomputed / st.events < 0.05 * giant


def test_a_rebuilt_state_goes_on_as_the_run_without_it() -> None:
    # The cluster simulator rebuilds the state when its jobs change and carries the
    # running ones over: their rates are computed again with the F they had, so the
    # run goes on as if nothing happened (with F evaluated anew at the rebuild, MLTCP
    # runs would drift apart by far more than this).
    whole, _ = _random_state(3, n_jobs=30, n_links=20, slope=4.0, iterations=6)
    assert fluid_engine.advance_until(whole, np.inf, 10**7) == fluid_engine.DONE
    old, _ = _random_state(3, n_jobs=30, n_links=20, slope=4.0, iterations=6)
    for until in (0.7, 1.9, 3.1):
        assert fluid_engine.advance_until(old, until, 10**7) == fluid_engine.RUNNING
        new, _ = _random_state(3, n_jobs=30, n_links=20, slope=4.0, iterations=6)
        fluid_engine.carry_over(old, new, [(j, j) for j in range(30)], old.t)
        old = new
    assert fluid_engine.advance_until(old, np.inf, 10**7) == fluid_engine.DONE
    np.testing.assert_allclose(old.end, whole.end, rtol=1e-9)


def test_slices_do_not_change_the_result() -> None:
    sc = load_scenario("three-jobs")
    batch, _ = build_batch([resolve(sc, sc.scheme("mltcp-cubic"), 0)])
    whole = fluid.lane_state(batch, 0, fluid.FluidOptions(), record_links=True)
    assert fluid_engine.advance_until(whole, np.inf, 10**7) == fluid_engine.DONE
    sliced = fluid.lane_state(batch, 0, fluid.FluidOptions(), record_links=True)
    until = 0.0
    while fluid_engine.advance_until(sliced, until, 10**7) != fluid_engine.DONE:
        until += 0.037
    assert sliced.events == whole.events
    np.testing.assert_array_equal(sliced.end, whole.end)
    np.testing.assert_allclose(fluid_engine.finish_bins(sliced)[:, :200],
                               fluid_engine.finish_bins(whole)[:, :200], rtol=1e-12)


def _slices_of(monkeypatch: pytest.MonkeyPatch, events: int) -> None:
    """Every compiled call processes at most ``events`` events, whatever its pace."""
    monkeypatch.setattr(fluid_engine, "SLICE_EVENTS_MIN", events)
    monkeypatch.setattr(fluid_engine, "SLICE_EVENTS_MAX", events)


@pytest.mark.parametrize("events", [1, 7])
def test_event_slices_do_not_change_the_result(monkeypatch: pytest.MonkeyPatch,
                                               events: int) -> None:
    # A call returns to Python every slice of events (so that signals are handled);
    # where it stops must not show: one event a call gives what one call for the whole
    # run gives, bit for bit, link samples included.
    sc = load_scenario("three-jobs")
    batch, _ = build_batch([resolve(sc, sc.scheme("mltcp-cubic"), 0)])
    runs = []
    for per_call in (1 << 62, events):
        _slices_of(monkeypatch, per_call)
        st = fluid.lane_state(batch, 0, fluid.FluidOptions(), record_links=True)
        assert fluid_engine.advance_until(st, np.inf, 10**7) == fluid_engine.DONE
        runs.append(st)
    whole, sliced = runs
    assert sliced.events == whole.events
    for rec in ("start", "comm_start", "comm_end", "end", "phase_start", "phase_end"):
        np.testing.assert_array_equal(getattr(sliced, rec), getattr(whole, rec))
    n = int(whole.t / whole.params[4]) + 1
    np.testing.assert_array_equal(fluid_engine.finish_bins(sliced)[:, :n],
                                  fluid_engine.finish_bins(whole)[:, :n])


def test_a_slice_of_events_stops_short_of_the_runs_event_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The run's budget (max_events) is still the error it was when slices are small.
    _slices_of(monkeypatch, 3)
    st, _ = _random_state(0, n_jobs=4, n_links=6, slope=4.0)
    assert fluid_engine.advance_until(st, np.inf, 10) == fluid_engine.TOO_MANY_EVENTS
    assert st.events == 10


def test_a_slice_takes_about_a_tenth_of_a_second() -> None:
    # The next slice: what would have taken SLICE_S at this pace, at most doubled, never
    # grown by a call that stopped early (at its horizon) and tells little of the pace.
    lo = fluid_engine.SLICE_EVENTS_MIN
    assert fluid_engine.next_slice(1000, 1000, 0.001) == 2000
    assert fluid_engine.next_slice(1000, 1000, 1.0) == max(lo, 100)
    assert fluid_engine.next_slice(1000, 10, 0.00001) == 1000
    assert fluid_engine.next_slice(1000, 10, 1.0) == lo
    assert fluid_engine.next_slice(1000, 0, 0.0) == 1000


def test_link_bins_hold_the_integral_of_the_rate() -> None:
    # One job alone: 1 MB at 1 MB/s after 0.1 s of compute, three iterations (1.1 s each);
    # 10 ms bins: 10 empty, 100 full (10 kB each), then the next iteration.
    st = _state([[0]], [0], [1e6], sample_s=0.01)
    while fluid_engine.advance_until(st, np.inf, 10_000) == fluid_engine.RUNNING:
        pass
    bins = fluid_engine.finish_bins(st)[0]
    assert bins[:10] == pytest.approx(np.zeros(10), abs=1e-6)
    assert bins[10:110] == pytest.approx(np.full(100, 1e4))
    assert bins[110:120] == pytest.approx(np.zeros(10), abs=1e-6)
    assert bins.sum() == pytest.approx(3e6)


def test_a_flow_without_capacity_is_stuck_not_silent() -> None:
    st = _state([[0]], [0], [0.0])
    assert fluid_engine.advance_until(st, np.inf, 10_000) == fluid_engine.STUCK
    batch, _ = build_batch([resolve(load_scenario("compatible-pair"),
                                    load_scenario("compatible-pair").scheme("cubic"), 0)])
    batch.capacity[:] = 0.0
    with pytest.raises(SpecError, match="topology"):
        fluid.simulate(batch)


def test_the_event_limit_is_an_error_that_names_the_option() -> None:
    sc = load_scenario("compatible-pair")
    batch, _ = build_batch([resolve(sc, sc.scheme("mltcp-cubic"), 0)])
    with pytest.raises(SpecError, match="max_steps"):
        fluid.simulate(batch, fluid.FluidOptions(max_steps=50))


def test_flows_that_cross_no_shaped_link_take_no_time() -> None:
    # A ring hop inside one server (no shaped link): the phase ends with the other flow.
    st = _state([[0], []], [0, 0], [1e6], iterations=2)
    assert fluid_engine.advance_until(st, np.inf, 10_000) == fluid_engine.DONE
    assert (st.end - st.start)[0] == pytest.approx([1.1, 1.1])


def _as_nobody(call):  # type: ignore[no-untyped-def]
    """``call()``'s result in a forked child that runs as an unprivileged user (as root,
    every directory is writable to os.access)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                     # the child
        try:
            os.close(read)
            if os.getuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            os.write(write, json.dumps(call()).encode())
        except BaseException as exc:  # noqa: BLE001 - said to the parent
            os.write(write, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        out = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(out)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A temporary directory another user can reach (pytest's tmp_path is root's only)."""
    with tempfile.TemporaryDirectory() as name:
        Path(name).chmod(0o755)
        yield Path(name)


def test_the_compiled_engine_finds_a_cache_directory_it_may_write(open_tmp: Path) -> None:
    tmp_path = open_tmp
    writable = tmp_path / "pkg"
    (writable / "__pycache__").mkdir(parents=True)
    (writable / "__pycache__").chmod(0o777)
    locked = tmp_path / "locked"
    (locked / "__pycache__").mkdir(parents=True)
    (locked / "__pycache__").chmod(0o555)
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o777)
    found = _as_nobody(lambda: [fluid_engine.cache_dir(writable, None),       # in the tree
                                fluid_engine.cache_dir(locked, home / ".cache"),  # user's
                                fluid_engine.cache_dir(locked, locked / "x"),
                                fluid_engine.cache_dir(locked, None), os.getuid()])
    assert isinstance(found, list), found
    in_tree, user_wide, neither, no_home, uid = found
    assert in_tree is None and user_wide is None
    assert neither == no_home == str(Path(tempfile.gettempdir()) / f"mltcp-numba-{uid}")


# A first state made in a fresh interpreter: what every command that runs the engine does.
FIRST_USE = """
import numpy as np
from mltcp.lab.models import fluid_engine
st = fluid_engine.new_state(np.array([0]), [[0]], np.array([1e6]), np.array([1e4]),
                            np.ones(1), np.ones((1, 1)), np.full((1, 1), 0.01),
                            np.array([3]), np.zeros(1), np.zeros((1, 1)), 0.0, 1.0, 1.0, 4,
                            0.0)
assert fluid_engine.advance_until(st, 1.0, 1000) == fluid_engine.DONE
"""


@pytest.mark.idle           # long and CPU-only: scripts/suite.py
def test_the_one_time_compile_says_so_and_a_cached_engine_says_nothing(
        tmp_path: Path) -> None:
    """With numba's cache empty (a new installation: here a fresh NUMBA_CACHE_DIR) the
    first use compiles the whole engine, about half a minute, and says so on stderr
    before and, with the time it took, after: one line each.  The next process loads it
    from the cache and says nothing."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}

    def first_use() -> list[str]:
        done = subprocess.run([sys.executable, "-c", FIRST_USE], env=env, text=True,
                              capture_output=True, timeout=600, check=True)
        return done.stderr.splitlines()

    said = first_use()
    assert len(said) == 2, said
    assert said[0] == (f"compiling the fluid engine (once per installation, "
                       f"~{fluid_engine.COMPILE_S} s)...")
    assert re.fullmatch(r"compiled the fluid engine in \d+ s", said[1]), said
    assert any((tmp_path / "numba").rglob("*.nbi"))           # numba's cache index
    assert first_use() == []


@pytest.mark.parametrize("slope", [0.0, 4.0])
def test_a_remainder_shorter_than_the_clocks_resolution_still_finishes(slope: float) -> None:
    # Ten hours into a cluster run a ring flow at 95 GB/s was left with a third of a
    # byte: t + rem / rate == t, so its finish event came back at t with nothing moved
    # and the engine spun forever (a vClos run of 300 jobs).  Posed here directly: one
    # flow on one link, its remainder (and distance to its F mark) set below one ulp of
    # the clock's worth of bytes.
    t0 = 35251.0
    st = fluid_engine.new_state(
        np.array([0]), [[0]], np.array([9.56e10]), np.array([1e8]), np.ones(1),
        np.ones((1, 1)), np.array([[0.1]]), np.array([2]), np.array([t0]), np.zeros((1, 1)),
        slope, 1.0, np.inf, 8, 0.0)
    assert fluid_engine.advance_until(st, t0 + 0.1, 10**4) == fluid_engine.RUNNING
    assert st.active[0] and st.rate[0] > 0
    st.rem[0] = 0.333
    st.sent[0] = 1e8 - 0.333
    fluid_engine.set_event(st, 0, st.t)
    assert fluid_engine.advance_until(st, np.inf, 10**4) == fluid_engine.DONE
    assert np.isfinite(st.end[0, 1])


def _one_flow_job(iterations: int = 4) -> fluid_engine.EngineState:
    """One job of one flow over one link: 0.1 s of compute, then 1 MB at 10 MB/s."""
    return fluid_engine.new_state(
        np.array([0]), [[0]], np.array([10e6]), np.array([1e6]), np.array([1.0]),
        np.ones((1, 1)), np.full((1, 1), 0.1), np.array([iterations]), np.zeros(1),
        np.zeros((1, 1)), 0.0, 1.0, np.inf, 8, 0.0)


def test_a_job_held_back_while_computing_starts_communicating_later() -> None:
    st = _one_flow_job()
    assert fluid_engine.next_comm_start(st, 0) == pytest.approx(0.1)
    fluid_engine.delay_next_comm(st, 0, 0.25)
    assert fluid_engine.next_comm_start(st, 0) == pytest.approx(0.35)
    assert fluid_engine.advance_until(st, np.inf, 10**6) == fluid_engine.DONE
    start, end = fluid_engine.iteration_span(st, 0, 0)
    assert (start, end) == (pytest.approx(0.0), pytest.approx(0.45))
    # the later iterations are not held: 0.1 s compute + 0.1 s communication each
    assert fluid_engine.iteration_span(st, 0, 1)[1] - end == pytest.approx(0.2)


def test_a_job_held_back_while_communicating_computes_longer_next_time() -> None:
    st = _one_flow_job()
    assert fluid_engine.advance_until(st, 0.15, 10**6) == fluid_engine.RUNNING
    assert fluid_engine.next_comm_start(st, 0) == pytest.approx(0.1)   # under way
    fluid_engine.delay_next_comm(st, 0, 0.25)
    assert fluid_engine.next_comm_start(st, 0) == pytest.approx(0.35)  # + the hold
    assert fluid_engine.advance_until(st, np.inf, 10**6) == fluid_engine.DONE
    assert fluid_engine.iterations_done(st, 0) == 4 and not fluid_engine.is_running(st, 0)
    first, second = (fluid_engine.iteration_span(st, 0, i) for i in (0, 1))
    assert first[1] == pytest.approx(0.2)                 # this iteration as it was
    assert second[1] - second[0] == pytest.approx(0.45)   # the next computes 0.25 s longer


def test_a_hold_is_carried_over_a_rebuild() -> None:
    # The cluster simulator rebuilds the engine's state when its jobs change; a hold a
    # network put on a job's next iteration must survive it.
    whole = _one_flow_job()
    assert fluid_engine.advance_until(whole, 0.15, 10**6) == fluid_engine.RUNNING
    fluid_engine.delay_next_comm(whole, 0, 0.25)
    rebuilt = _one_flow_job()
    fluid_engine.carry_over(whole, rebuilt, [(0, 0)], whole.t)
    assert fluid_engine.next_comm_start(rebuilt, 0) == pytest.approx(0.35)
    assert fluid_engine.advance_until(rebuilt, np.inf, 10**6) == fluid_engine.DONE
    start, end = fluid_engine.iteration_span(rebuilt, 0, 1)
    assert end - start == pytest.approx(0.45)

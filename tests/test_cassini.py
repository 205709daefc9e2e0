"""Cassini (thesis chapter 4): unified circles, compatibility score, Algorithms 1 and 2.

Pure computation, no network: the whole file runs in a few seconds.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.common import cassini
from mltcp.lab.common.cassini import (
    AffinityGraph,
    CassiniLoopWarning,
    JobDemand,
    LinkSolution,
    Phase,
    affinity_graph,
    best_rotations,
    compatibility_score,
    demand_on_circle,
    has_loop,
    rank_placements,
    schedule,
    time_shifts,
    unified_perimeter_ms,
)

C = 1000.0  # link capacity, Mbit/s


def job(name: str, period: float, *phases: tuple[float, float, float]) -> JobDemand:
    return JobDemand(name, period, tuple(Phase(*p) for p in phases))


def up(name: str, period: float, share: float, demand: float = C, start: float = 0.0):
    """A data-parallel job: one Up phase of ``share`` of the period at ``demand``."""
    return job(name, period, (start, share * period, demand))


# --------------------------------------------------------------------------------------
# Unified circle (section 4.3)


def test_unified_perimeter_is_lcm_of_rounded_iteration_times():
    """Section 4.3.2: jobs of 40 ms and 60 ms share a circle of LCM(40, 60) = 120 units."""
    assert unified_perimeter_ms([40, 60]) == 120.0
    assert unified_perimeter_ms({"a": 39.7, "b": 60.2}) == 120.0     # rounded to 1 ms first
    assert unified_perimeter_ms([255]) == 255.0
    assert unified_perimeter_ms([33, 50], resolution_ms=10) == 150.0  # 30 and 50 at 10 ms


def test_unified_perimeter_explosion_names_the_jobs_and_a_coarser_resolution():
    with pytest.raises(SpecError) as err:
        unified_perimeter_ms({"a": 255, "b": 257, "c": 40}, max_perimeter_ms=10_000)
    assert err.value.field == "periods_ms"
    assert "b (257 ms)" in err.value.problem                 # dropping b alone fixes it
    assert "resolution_ms=2" in err.value.fix
    assert "\n" not in str(err.value)
    # the suggestion works
    assert unified_perimeter_ms({"a": 255, "b": 257, "c": 40}, 2, 10_000) <= 10_000


def test_demand_on_circle_repeats_each_job_around_the_unified_circle():
    """Figure 4.5(a, b): on a 120 ms circle a 40 ms job appears 3 times, a 60 ms job twice."""
    j1, j2 = up("j1", 40, 0.25), up("j2", 60, 10 / 60)
    rows = demand_on_circle([j1, j2], step_deg=5)
    assert rows.shape == (2, 72)
    np.testing.assert_allclose(rows[0], np.tile(rows[0][:24], 3))
    np.testing.assert_allclose(rows[1], np.tile(rows[1][:36], 2))
    # 10 ms Up phases are 30 degrees = 6 bins at full demand, then silence
    assert list(rows[0][:24]) == [C] * 6 + [0.0] * 18
    assert list(rows[1][:36]) == [C] * 6 + [0.0] * 30
    # bin values are means, so a job's average demand is preserved exactly
    assert rows.mean(axis=1) == pytest.approx([C / 4, C / 6])


def test_vgg16_circle_matches_figure_4_3():
    """Figure 4.3(c): VGG16, 255 ms iteration, Down phase of 141 units drawn as about 200
    degrees starting at 0, the Up phase filling the rest of the circle."""
    vgg16 = job("vgg16", 255, (141, 114, C))
    row = demand_on_circle([vgg16])[0]
    down_deg = 360 - row.sum() / C * 5                # 141/255 of the circle
    assert down_deg == pytest.approx(199.06, abs=0.01)
    assert abs(down_deg - 200) < 1.5
    assert not row[:39].any() and (row[40:] == C).all()   # bin 39 is partly Up


def test_demand_on_circle_partial_bins_and_shifts():
    j = job("j", 100, (10, 5, 800.0))                 # 10..15 ms; 4 bins of 25 ms
    assert list(demand_on_circle([j], step_deg=90)[0]) == [160.0, 0.0, 0.0, 0.0]
    shifted = demand_on_circle([j], step_deg=90, shifts_ms={"j": 12.5})[0]
    assert list(shifted) == pytest.approx([80.0, 80.0, 0.0, 0.0])


# --------------------------------------------------------------------------------------
# Compatibility score (section 4.3.6, Table 4.1)


def test_score_is_one_minus_mean_excess_over_capacity():
    """Table 4.1 by hand: 4 bins, one holds 2C -> excess C in 1 of 4 bins -> 1 - 1/4."""
    j = job("j", 100, (0, 25, 2 * C))
    assert compatibility_score([j], C, step_deg=90) == pytest.approx(0.75)
    # "it is possible for the score to become negative" (section 4.3.6)
    three = [up(f"f{i}", 100, 1.0) for i in range(3)]
    assert compatibility_score(three, C) == pytest.approx(-1.0)


def test_figure_4_5_rotating_by_30_degrees_makes_40_and_60_ms_jobs_compatible():
    """Section 4.3.2, Figure 4.5(d): a 40 ms and a 60 ms job on a 120-unit circle become
    fully compatible (score 1) after a 30 degree rotation. The figure gives no durations;
    here each job communicates 10 ms per iteration at the full link capacity."""
    j1, j2 = up("j1", 40, 0.25), up("j2", 60, 10 / 60)
    assert compatibility_score([j1, j2], C) < 1                 # both start at 0: overlap
    assert compatibility_score([j1, j2], C, {"j1": 30}) == 1.0
    assert compatibility_score([j1, j2], C, {"j1": -30}) == 1.0
    assert compatibility_score([j1, j2], C, [0, 30]) == 1.0
    solution = best_rotations([j1, j2], C, link="l1")
    assert solution.score == 1.0 and solution.exact
    assert solution.rotations_deg["j1"] == 0.0
    assert solution.rotations_deg["j2"] in (30.0, 90.0, 150.0)  # within j2's 1st iteration
    # equation 4.5: shift = rotation / 360 * perimeter, modulo the job's period
    assert solution.perimeter_ms == 120.0
    assert solution.shifts_ms["j2"] == pytest.approx(solution.rotations_deg["j2"] / 3)
    assert solution.shifts_ms["j2"] < 60


def test_two_vgg16_jobs_interleave():
    """Section 4.3 (Figure 4.3): VGG16's Up phase is 114 of 255 ms, so two VGG16 jobs fit
    once one is delayed by between 114 and 141 ms."""
    a, b = job("a", 255, (141, 114, C)), job("b", 255, (141, 114, C))
    solution = best_rotations([a, b], C)
    assert solution.score == 1.0
    assert 114 <= solution.shifts_ms["b"] <= 141


def test_identical_half_period_jobs_need_a_half_period_shift():
    a, b = up("a", 100, 0.5), up("b", 100, 0.5)
    assert compatibility_score([a, b], C) == pytest.approx(0.5)
    solution = best_rotations([a, b], C)
    assert solution.score == 1.0
    assert solution.rotations_deg == {"a": 0.0, "b": 180.0}
    assert solution.shifts_ms == {"a": 0.0, "b": 50.0}
    assert compatibility_score([a, b], C, shifts_ms={"b": 50.0}) == 1.0


def test_incompatible_set_scores_below_one_for_every_rotation():
    """Total communication share 1.2 > 1: some excess is unavoidable. The mean excess is at
    least mean demand - C, so every rotation scores at most 2 - 1.2 = 0.8."""
    jobs = [up("a", 40, 0.4), up("b", 60, 0.4), up("c", 120, 0.4, start=30)]
    rng = np.random.default_rng(0)
    for _ in range(40):
        rotations = rng.uniform(0, 360, size=3)
        assert compatibility_score(jobs, C, list(rotations)) <= 0.8 + 1e-9
    best = best_rotations(jobs, C)
    assert best.exact and best.score <= 0.8 + 1e-9
    assert best.score < 1


def test_exhaustive_search_finds_the_grid_optimum_and_agrees_with_the_score():
    jobs = [job("a", 60, (0, 20, 700.0), (30, 10, 400.0)),
            job("b", 30, (5, 8, 600.0)),
            job("c", 60, (10, 25, 500.0))]
    solution = best_rotations(jobs, C, step_deg=15)
    assert solution.exact
    brute = max(compatibility_score(jobs, C, [0, rb, rc], step_deg=15)
                for rb, rc in itertools.product(range(0, 360, 15), repeat=2))
    assert solution.score == pytest.approx(brute)
    again = compatibility_score(jobs, C, solution.rotations_deg, step_deg=15)
    assert again == pytest.approx(solution.score)


def _ten_jobs_bound(solution_jobs: int, bins: int) -> int:
    """Most score evaluations the heuristic can make (greedy + descents + final scores)."""
    per_sweep = (solution_jobs - 1) * bins
    return per_sweep + (cassini.DEFAULT_ROUNDS + 1) * (cassini.MAX_SWEEPS * per_sweep + 1)


def test_ten_compatible_jobs_at_5_degrees_reach_score_one_with_bounded_work():
    """Ten jobs each communicating 35 of 360 degrees fit around one circle (350 degrees in
    all); the search space (72**9) needs the heuristic, which must still find them."""
    jobs = [up(f"k{i}", 100, 35 / 360) for i in range(10)]
    solution = best_rotations(jobs, C, step_deg=5)
    assert not solution.exact
    assert solution.score == 1.0
    assert solution.evaluations <= _ten_jobs_bound(10, 72)
    assert len(set(solution.rotations_deg.values())) == 10
    assert compatibility_score(jobs, C, solution.rotations_deg) == 1.0


def test_ten_mixed_jobs_search_is_bounded_reproducible_and_not_worse_than_greedy():
    rng = np.random.default_rng(7)
    jobs = []
    for i in range(10):
        period = float(rng.choice([40, 60, 80, 120, 240]))
        jobs.append(job(f"m{i}", period,
                        (0, period * rng.uniform(0.05, 0.2), C * rng.uniform(0.3, 1.0)),
                        (0.6 * period, 0.1 * period, 0.4 * C)))
    solution = best_rotations(jobs, C, step_deg=5, link="tor1")
    assert solution.link == "tor1" and not solution.exact
    assert 0 < solution.evaluations <= _ten_jobs_bound(10, 72)
    assert best_rotations(jobs, C, step_deg=5, link="tor1") == solution
    assert solution.score >= best_rotations(jobs, C, rounds=0).score
    assert solution.score > compatibility_score(jobs, C)
    assert all(0 <= solution.shifts_ms[j.name] < j.period_ms for j in jobs)


# --------------------------------------------------------------------------------------
# Affinity graph and Algorithm 1 (section 4.4.1)


def test_affinity_graph_keeps_only_shared_links_and_their_jobs():
    graph = affinity_graph({"j1": ["l1", "a"], "j2": ["l1", "l2"], "j3": ["l2"], "j4": ["b"]})
    assert graph == AffinityGraph(jobs=("j1", "j2", "j3"), links=("l1", "l2"),
                                  edges=(("j1", "l1"), ("j2", "l1"), ("j2", "l2"),
                                         ("j3", "l2")))
    assert graph.links_of("j2") == ("l1", "l2")
    assert graph.jobs_on("l2") == ("j2", "j3")
    assert graph.components() == [("j1", "j2", "j3")]


def test_loop_detection():
    assert not has_loop(affinity_graph({"j1": ["l1"], "j2": ["l1", "l2"], "j3": ["l2"]}))
    assert not has_loop(affinity_graph({"j1": ["l1"], "j2": ["l1"], "j3": ["l1"]}))
    # two jobs sharing two links: j1 - l1 - j2 - l2 - j1
    assert has_loop(affinity_graph({"j1": ["l1", "l2"], "j2": ["l1", "l2"]}))
    # a triangle: j1 - l1 - j2 - l2 - j3 - l3 - j1
    triangle = {"j1": ["l1", "l3"], "j2": ["l1", "l2"], "j3": ["l2", "l3"]}
    assert has_loop(affinity_graph(triangle))
    # a loop in one component is found even when another component is a tree
    assert has_loop(affinity_graph({**triangle, "j4": ["x"], "j5": ["x"]}))


def test_algorithm_1_worked_example_equations_4_7_to_4_9():
    """Section 4.4.1, Figure 4.8(b): along j1 - l1 - j2 - l2 - j3,
    t_j1 = 0, t_j2 = (-t^l1_j1 + t^l1_j2) mod iter_j2,
    t_j3 = (-t^l1_j1 + t^l1_j2 - t^l2_j2 + t^l2_j3) mod iter_j3."""
    solutions = {
        "l1": LinkSolution("l1", 1.0, {}, {"j1": 5.0, "j2": 20.0}),
        "l2": LinkSolution("l2", 1.0, {}, {"j2": 10.0, "j3": 28.0}),
    }
    periods = {"j1": 100.0, "j2": 60.0, "j3": 30.0}
    shifts = time_shifts({"j1": ["l1"], "j2": ["l1", "l2"], "j3": ["l2"], "j4": ["l9"]},
                         solutions, periods)
    assert shifts["j1"] == 0.0
    assert shifts["j2"] == pytest.approx((-5 + 20) % 60)
    assert shifts["j3"] == pytest.approx((-5 + 20 - 10 + 28) % 30)       # 33 mod 30 = 3
    assert shifts["j4"] == 0.0                                          # shares no link


def _tree_placement(periods: list[float]) -> dict[str, list[JobDemand]]:
    """Seven jobs on five links forming a loop-free affinity graph (plus a private link)."""
    rng = np.random.default_rng(11)
    jobs = {}
    for i, period in enumerate(periods):
        start = float(rng.uniform(0, 0.5 * period))
        jobs[f"j{i}"] = job(f"j{i}", period, (start, 0.3 * period, C * rng.uniform(0.5, 1)),
                            (0.9 * period, 0.05 * period, 0.5 * C))
    links = {"l1": ["j0", "j1"], "l2": ["j1", "j2", "j3"], "l3": ["j3", "j4"],
             "l4": ["j0", "j5"], "l5": ["j4", "j6"], "private": ["j6"]}
    return {link: [jobs[n] for n in names] for link, names in links.items()}


@pytest.mark.parametrize("periods", [[100.0] * 7, [40.0, 60.0, 120.0, 60.0, 40.0, 80.0, 120.0]])
def test_loop_free_shifts_keep_every_links_relative_shifts(periods):
    """Theorem 1 / equation 4.6: on a loop-free affinity graph, for every link and every
    pair of its jobs, t_a - t_b equals the link's optimal relative shift w_a - w_b modulo
    the period (modulo gcd of the two periods when they differ: delaying a job by a whole
    iteration changes nothing)."""
    placement = _tree_placement(periods)
    result = schedule(placement, {link: C for link in placement})
    assert not result.has_loop and result.broken_links == ()
    assert set(result.link_scores) == {"l1", "l2", "l3", "l4", "l5"}
    t = result.shifts_ms
    for link, solution in result.link_solutions.items():
        w, p = solution.shifts_ms, solution.periods_ms
        for a, b in itertools.combinations(w, 2):
            g = math.gcd(int(p[a]), int(p[b]))
            diff = ((t[a] - t[b]) - (w[a] - w[b])) % g
            assert min(diff, g - diff) == pytest.approx(0, abs=1e-6), (link, a, b)
    for jobs in placement.values():
        for j in jobs:
            assert 0 <= t[j.name] < j.period_ms
    if len(set(periods)) == 1:
        # one circle size everywhere: the unique shifts reproduce each link's optimum score
        for link, solution in result.link_solutions.items():
            got = compatibility_score(placement[link], C, shifts_ms=t)
            assert got == pytest.approx(solution.score, abs=1e-9), link


def test_loop_with_conflicting_links_warns_and_keeps_the_bfs_tree():
    a, b = up("a", 100, 0.5), up("b", 100, 0.5)
    solutions = {"l1": LinkSolution("l1", 1.0, {}, {"a": 0.0, "b": 50.0}, {"a": 100, "b": 100}),
                 "l2": LinkSolution("l2", 1.0, {}, {"a": 0.0, "b": 20.0}, {"a": 100, "b": 100})}
    paths = {"a": ["l1", "l2"], "b": ["l1", "l2"]}
    with pytest.warns(CassiniLoopWarning, match="l2"):
        shifts = time_shifts(paths, solutions)
    assert shifts == {"a": 0.0, "b": 50.0}                  # the BFS reached b through l1
    with pytest.raises(SpecError) as err:
        time_shifts(paths, solutions, strict=True)
    assert err.value.field == "job_links"
    # a loop whose links agree loses nothing and stays quiet
    agreeing = {**solutions, "l2": solutions["l1"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert time_shifts(paths, agreeing) == {"a": 0.0, "b": 50.0}
    result = schedule({"l1": [a, b], "l2": [a, b]}, {"l1": C, "l2": C})
    assert result.has_loop and result.broken_links == ()     # same jobs, same optimum


# --------------------------------------------------------------------------------------
# Algorithm 2 (section 4.4.2)


def test_rank_placements_discards_loops_and_sorts_by_average_link_score():
    half_a, half_b = up("a", 100, 0.5), up("b", 100, 0.5)
    big_a, big_b = up("a", 100, 0.6), up("b", 100, 0.6)
    candidates = [
        {"l1": [big_a, big_b]},                              # 0: incompatible, 0.8
        {"l1": [half_a, half_b], "l2": [half_a]},            # 1: compatible, 1.0
        {"l1": [half_a, half_b], "l2": [half_a, half_b]},    # 2: loop -> discarded
        {"l1": [half_a], "l2": [half_b]},                    # 3: nothing shared, 1.0
        {"l1": [big_a, big_b], "l2": [half_b, up("c", 100, 0.5)]},  # 4: mean(0.8, 1.0)
    ]
    capacities = {"l1": C, "l2": C}
    ranked = rank_placements(candidates, capacities)
    assert [i for i, _ in ranked] == [1, 3, 4, 0]
    assert [s for _, s in ranked] == pytest.approx([1.0, 1.0, 0.9, 0.8])
    by_min = dict(rank_placements(candidates, capacities, aggregate="min"))
    assert by_min[4] == pytest.approx(0.8)
    assert schedule(candidates[ranked[0][0]], capacities).shifts_ms == {"a": 0.0, "b": 50.0}


# --------------------------------------------------------------------------------------
# Bad input


def _bad_inputs():
    a, b = up("a", 100, 0.5), up("b", 100, 0.5)
    sol = LinkSolution("l1", 1.0, {}, {"a": 0.0, "b": 50.0}, {"a": 100.0, "b": 100.0})
    return [
        ("x.period_ms", lambda: JobDemand("x", 0, ())),
        ("x.period_ms", lambda: JobDemand("x", -5, ())),
        ("x.phases[0].start_ms", lambda: job("x", 100, (100, 5, C))),
        ("x.phases[1].duration_ms", lambda: job("x", 100, (0, 5, C), (90, 20, C))),
        ("Phase.duration_ms", lambda: Phase(0, 0, C)),
        ("Phase.demand", lambda: Phase(0, 5, -1)),
        ("step_deg", lambda: demand_on_circle([a], step_deg=7)),
        ("step_deg", lambda: demand_on_circle([a], step_deg=0)),
        ("step_deg", lambda: demand_on_circle([a, up("c", 1, 0.5)], step_deg=90)),
        ("capacity", lambda: compatibility_score([a, b], 0)),
        ("jobs[1].name", lambda: best_rotations([a, a], C)),
        ("jobs", lambda: best_rotations([], C)),
        ("rotations_deg", lambda: compatibility_score([a, b], C, {"zz": 10})),
        ("periods_ms[1]", lambda: unified_perimeter_ms([40, 0])),
        ("perimeter_ms", lambda: demand_on_circle([a], perimeter_ms=150)),
        ("job_links", lambda: time_shifts({"a": ["l1"], "b": ["l1"], "c": ["l1"]},
                                          {"l1": sol})),
        ("link_solutions", lambda: time_shifts({"a": ["l1"], "b": ["l1"]}, {})),
        ("link_solutions", lambda: time_shifts({"a": ["l1"], "b": ["l1", "l2"], "c": ["l2"]},
                                               {"l1": sol, "l2": LinkSolution(
                                                   "l2", 1, {}, {"a": 1, "b": 0, "c": 0})})),
        ("periods_ms", lambda: time_shifts({"a": ["l1"], "b": ["l1"]},
                                           {"l1": LinkSolution("l1", 1, {}, {"a": 0, "b": 1})})),
        ("job_links[a]", lambda: affinity_graph({"a": "l1"})),
        ("capacities", lambda: schedule({"l1": [a, b]}, {})),
        ("jobs_per_link[l2]", lambda: schedule({"l1": [a], "l2": [up("a", 50, 0.5), b]},
                                               {"l1": C, "l2": C})),
        ("aggregate", lambda: rank_placements([{"l1": [a, b]}], {"l1": C}, aggregate="p99")),
    ]


@pytest.mark.parametrize("field, call", _bad_inputs(),
                         ids=[f"{i}-{f}" for i, (f, _) in enumerate(_bad_inputs())])
def test_bad_input_raises_spec_error_naming_the_field(field, call):
    with pytest.raises(SpecError) as err:
        call()
    assert err.value.field == field
    message = str(err.value)
    assert message.startswith(f"{field}: ") and "\n" not in message
    assert err.value.fix


# Iteration times like 241/153/233 ms: at every resolution up to 5 ms their LCM is over
# 100 s, at 10 ms it is 27.6 s, where 5-degree bins (383 ms) are longer than every period.
HETEROGENEOUS = (JobDemand("a", 241, (Phase(141, 100, 1000),)),
                 JobDemand("b", 153, (Phase(90, 60, 1000),)),
                 JobDemand("c", 233, (Phase(135, 95, 1000),)))


def test_a_long_unified_circle_is_divided_finer_instead_of_refused():
    step = cassini.adapted_step_deg(HETEROGENEOUS, 5.0, resolution_ms=10)
    assert 27600 / (360 / step) * cassini.MIN_BINS_PER_PERIOD <= 150   # 8 bins per period
    result = cassini.schedule({"l": list(HETEROGENEOUS)}, {"l": 1000.0}, 5.0, resolution_ms=10)
    solution = result.link_solutions["l"]
    assert solution.perimeter_ms == pytest.approx(27600)
    unshifted = cassini.compatibility_score(list(HETEROGENEOUS), 1000.0, None, step,
                                            resolution_ms=10)
    assert solution.score > unshifted        # the shifts found do better than none
    # Periods that each span a bin already keep the step, so earlier results stand.
    same = (JobDemand("a", 120, (Phase(0, 50, 1000),)), JobDemand("b", 120, (Phase(0, 50, 1000),)))
    assert cassini.adapted_step_deg(same, 5.0) == 5.0


def test_heterogeneous_jobs_get_cassini_shifts_in_the_lab():
    """What `mltcp compare` stopped on: three jobs of ~241/153/233 ms iterations."""
    import copy
    import tomllib
    from importlib import resources

    from mltcp.lab.scenario.plan import resolve
    from mltcp.lab.scenario.schedule import cassini_shifts, job_demand
    from mltcp.lab.scenario.spec import Scheme, parse_scenario

    raw = tomllib.loads(resources.files("mltcp.lab.scenario").joinpath(
        "examples", "three-jobs.toml").read_text())
    raw = copy.deepcopy(raw)
    comm_ms = {"a": 6e6, "b": 8e6, "c": 10e6}
    for job, period in zip(raw["jobs"], (241.0, 153.0, 233.0), strict=True):
        comm = comm_ms[job["name"]] * 8 / (1000e6 * 1448 / 1514) * 1000
        job["compute_ms"] = round(period - comm, 3)
    scenario = parse_scenario(raw)
    plan = resolve(scenario, Scheme("cassini", "cubic", False, schedule="cassini"), 0)
    assert sorted(round(job_demand(j, plan).period_ms) for j in plan.jobs) == [153, 233, 241]
    shifts = cassini_shifts(plan)
    assert set(shifts) == {"a", "b", "c"} and any(v > 0 for v in shifts.values())

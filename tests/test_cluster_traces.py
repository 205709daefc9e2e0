"""Job traces: seeded Poisson draws with the statistics they promise, the load-to-rate
conversion, and the CSV format (round trip, and one-line errors naming row and column)."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from pathlib import Path

import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.arrivals import catalogue
from mltcp.lab.cluster.arrivals.job_traces import (
    IntRange,
    JobMix,
    Weighted,
    format_csv,
    jobs_per_hour_for_load,
    mean_gap_s,
    parse_csv,
    poisson_trace,
    read_csv,
    write_csv,
)
from mltcp.lab.cluster.engine.simulator import JobRequest

MIX = JobMix(models=Weighted(("ada/vgg16", "resnet50"), (3.0, 1.0)),
             gpus=Weighted((1, 4, 8), (1.0, 1.0, 2.0)), iterations=IntRange(10, 20))
HEADER = "name,arrival_s,model,compute_s,gradient_bytes,gpus,iterations"


def test_weighted_draws_follow_their_weights() -> None:
    w = Weighted(("a", "b", "c"), (1.0, 2.0, 7.0))
    rng = random.Random(1)
    counts = Counter(w.draw(rng) for _ in range(20_000))
    for value, p in w.probabilities().items():
        assert counts[value] / 20_000 == pytest.approx(p, abs=0.015)
    assert Weighted.uniform("xy").probabilities() == {"x": 0.5, "y": 0.5}


@pytest.mark.parametrize("values, weights", [((), ()), ((1, 2), (1.0,)), ((1,), (-1.0,)),
                                             ((1, 2), (0.0, 0.0))])
def test_a_bad_distribution_is_refused(values: tuple, weights: tuple) -> None:
    with pytest.raises(SpecError):
        Weighted(values, weights)


def test_a_mix_refuses_an_unknown_model_and_a_backwards_range() -> None:
    with pytest.raises(SpecError) as err:
        JobMix(Weighted.uniform(["vgg17"]), Weighted.uniform([1]), IntRange(1, 2))
    assert err.value.field == "model"
    with pytest.raises(SpecError):
        IntRange(5, 4)


def test_a_poisson_trace_is_seeded() -> None:
    a, b = poisson_trace(50, 100.0, MIX, seed=7), poisson_trace(50, 100.0, MIX, seed=7)
    assert a == b
    assert a != poisson_trace(50, 100.0, MIX, seed=8)


def test_poisson_gaps_are_exponential_at_the_rate() -> None:
    jobs = poisson_trace(4000, 120.0, MIX, seed=0)
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(jobs, jobs[1:], strict=False)]
    assert jobs[0].arrival_s == 0.0 and min(gaps) >= 0
    assert mean_gap_s(jobs) == pytest.approx(30.0, rel=0.05)          # 3600 / 120
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, abs=0.08)


def test_poisson_jobs_draw_from_the_mix() -> None:
    jobs = poisson_trace(4000, 60.0, MIX, seed=1)
    assert len({j.name for j in jobs}) == len(jobs)
    assert Counter(j.model for j in jobs)["ada/vgg16"] / len(jobs) == pytest.approx(0.75,
                                                                                   abs=0.03)
    assert Counter(j.gpus for j in jobs)[8] / len(jobs) == pytest.approx(0.5, abs=0.03)
    assert {j.iterations for j in jobs} == set(range(10, 21))
    for j in jobs[:20]:
        p = catalogue.profile(j.model)
        assert (j.compute_s, j.gradient_bytes) == (p.compute_s, p.gradient_bytes)


def test_load_becomes_a_rate_by_gpu_seconds() -> None:
    mix = JobMix(Weighted.uniform(["ada/vgg16"]), Weighted((2, 8), (1.0, 1.0)), IntRange(100, 300))
    p = catalogue.profile("ada/vgg16")
    comm = p.gradient_bytes * 8 / 10e9                       # 2-server ring at 10 Gbit/s
    # 2 GPUs fit a 4-GPU server (no network); 8 GPUs cross it.
    per_job = 200 * (0.5 * 2 * p.compute_s + 0.5 * 8 * (p.compute_s + comm))
    assert mix.mean_gpu_seconds(10.0, 4) == pytest.approx(per_job)
    assert jobs_per_hour_for_load(0.9, 64, mix, 10.0, 4) == pytest.approx(
        0.9 * 64 * 3600 / per_job)
    with pytest.raises(SpecError):
        jobs_per_hour_for_load(0.0, 64, mix, 10.0, 4)


@pytest.mark.parametrize("n, rate", [(0, 10.0), (10, 0.0), (10, float("inf"))])
def test_bad_poisson_parameters_are_refused(n: int, rate: float) -> None:
    with pytest.raises(SpecError):
        poisson_trace(n, rate, MIX)


# --- CSV ----------------------------------------------------------------------------


def test_a_written_trace_reads_back_equal(tmp_path: Path) -> None:
    jobs = poisson_trace(40, 300.0, MIX, seed=2)
    jobs.append(JobRequest("odd, name", 1 / 3, 3, 0.1 + 0.2, 123456789.123, 7))
    path = tmp_path / "t.csv"
    write_csv(jobs, path)
    assert read_csv(path) == jobs
    assert parse_csv(format_csv(jobs)) == jobs


def test_the_three_ways_to_give_a_jobs_costs() -> None:
    text = f"""# a comment, then a blank line

{HEADER}
j0,0,vgg16,,,4,1000
j1,12.5,,0.2,100MB,8,500
j2,30,my-bert,0.15,4.2e8,2,800
"""
    j0, j1, j2 = parse_csv(text)
    vgg16 = catalogue.profile("vgg16")
    assert j0 == JobRequest("j0", 0.0, 4, vgg16.compute_s, vgg16.gradient_bytes, 1000, "vgg16")
    assert j1 == JobRequest("j1", 12.5, 8, 0.2, 100e6, 500, "")
    assert j2 == JobRequest("j2", 30.0, 2, 0.15, 4.2e8, 800, "my-bert")


def test_columns_come_in_any_order() -> None:
    text = "iterations,gpus,model,arrival_s,name\n10,2,resnet50,1.5,a\n"
    assert parse_csv(text) == [catalogue.job_request("resnet50", name="a", arrival_s=1.5,
                                                     gpus=2, iterations=10)]


@pytest.mark.parametrize("row, column, problem", [
    ("j1,-1,vgg16,,,4,10", "arrival_s", "must be >= 0"),
    ("j1,x,vgg16,,,4,10", "arrival_s", "not a number"),
    ("j1,0,vgg16,,,4.5,10", "gpus", "not an integer"),
    ("j1,0,vgg16,,,0,10", "gpus", "between 1"),
    ("j1,0,vgg16,,,4,", "iterations", "is empty"),
    (",0,vgg16,,,4,10", "name", "is empty"),
    ("j1,0,vgg17,,,4,10", "model", "unknown model"),
    ("j1,0,,0.1,,4,10", "gradient_bytes", "is empty"),
    ("j1,0,vgg16,0.1,,4,10", "gradient_bytes", "is empty"),
    ("j1,0,,,5MB,4,10", "compute_s", "is empty"),
    ("j1,0,,0.1,lots,4,10", "gradient_bytes", "cannot parse"),
    ("j1,0,,nan,5MB,4,10", "compute_s", "must be >= 0"),
    ("j0,0,vgg16,,,4,10", "name", "earlier row"),
])
def test_a_bad_row_fails_naming_its_row_and_column(row: str, column: str, problem: str) -> None:
    text = f"{HEADER}\nj0,0,vgg16,,,4,10\n\n{row}\n"
    with pytest.raises(SpecError) as err:
        parse_csv(text, "t.csv")
    assert err.value.field == f"t.csv:4 (row 2) column {column}"
    assert problem in str(err.value)
    assert "\n" not in str(err.value)


def test_a_bad_header_or_row_shape_fails_in_one_line() -> None:
    with pytest.raises(SpecError) as err:
        parse_csv("name,arrival,gpus,iterations,model\n", "t.csv")
    assert err.value.field == "t.csv:1 column arrival" and "arrival_s" in err.value.fix
    with pytest.raises(SpecError) as err:
        parse_csv("name,arrival_s,model,gpus\n", "t.csv")
    assert err.value.field == "t.csv:1 column iterations"
    with pytest.raises(SpecError) as err:
        parse_csv("name,arrival_s,gpus,iterations\n", "t.csv")
    assert err.value.field == "t.csv:1 column model"
    with pytest.raises(SpecError) as err:
        parse_csv("name,arrival_s,gpus,gpus,iterations,model\n", "t.csv")
    assert "twice" in str(err.value)
    with pytest.raises(SpecError) as err:
        parse_csv(f"{HEADER}\nj0,0,vgg16,,4,10\n", "t.csv")
    assert err.value.field == "t.csv:2 (row 1)" and "6 cells for 7" in str(err.value)
    with pytest.raises(SpecError):
        parse_csv("# only a comment\n", "t.csv")


def test_an_unreadable_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError):
        read_csv(tmp_path / "missing.csv")

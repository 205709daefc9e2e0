"""Per-iteration budgets from job descriptions, the budget learner, and size parsing."""

from __future__ import annotations

import random

import pytest

from mltcp.core.aggressiveness import MAX_BUDGET_BYTES
from mltcp.core.budget import BudgetLearner, Collective, JobDescription
from mltcp.core.errors import SpecError
from mltcp.core.validate import parse_bytes

MB = 1_000_000


@pytest.mark.parametrize(
    ("collective", "workers", "gradient", "expected"),
    [
        (Collective.RING_ALLREDUCE, 4, 100 * MB, 150 * MB),  # 2 * 3/4 * 100 MB
        (Collective.RING_ALLREDUCE, 2, 100 * MB, 100 * MB),
        (Collective.RING_ALLREDUCE, 3, 100, 134),  # 2 * 2/3 * 100 = 133.33 -> ceil
        (Collective.TREE_ALLREDUCE, 8, 80 * MB, 140 * MB),  # average per rank == ring
        (Collective.REDUCE_SCATTER, 4, 100 * MB, 75 * MB),
        (Collective.ALL_GATHER, 5, 100 * MB, 80 * MB),
        (Collective.REDUCE_SCATTER_ALL_GATHER, 4, 100 * MB, 150 * MB),
        (Collective.ALL_TO_ALL, 8, 64 * MB, 56 * MB),
        (Collective.ALL_TO_ALL, 3, 10, 7),  # 20/3 = 6.67 -> ceil
    ],
)
def test_collective_bytes(
    collective: Collective, workers: int, gradient: int, expected: int
) -> None:
    job = JobDescription(gradient_bytes=gradient, workers=workers, collective=collective)
    assert job.bytes_per_iteration() == expected


@pytest.mark.parametrize(
    ("role", "workers", "servers", "expected"),
    [
        ("worker", 4, 1, 100 * MB),  # push G; pulls are received
        ("worker", 1, 1, 100 * MB),
        ("server", 4, 1, 400 * MB),  # G to each of 4 workers
        ("server", 4, 2, 200 * MB),  # sharded over 2 servers
        ("server", 5, 3, 166_666_667),  # 500 MB / 3 -> ceil
    ],
)
def test_parameter_server_bytes(role: str, workers: int, servers: int, expected: int) -> None:
    job = JobDescription(100 * MB, workers, Collective.PARAMETER_SERVER, role, servers)
    assert job.bytes_per_iteration() == expected


def test_large_budget_is_exact_integer() -> None:
    g = 3 * (1 << 37) + 1  # ring N=3: 4g/3 = 2**39 + 4/3 -> ceil 2**39 + 2
    assert JobDescription(g, 3).bytes_per_iteration() == (1 << 39) + 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [("ring_allreduce", Collective.RING_ALLREDUCE), ("Tree-AllReduce", Collective.TREE_ALLREDUCE),
     (" all_to_all ", Collective.ALL_TO_ALL), ("parameter_server", Collective.PARAMETER_SERVER)],
)
def test_collective_parsed_from_string(text: str, expected: Collective) -> None:
    job = JobDescription(1000, 4, text)  # type: ignore[arg-type]
    assert job.collective is expected
    assert job.collective == expected.value  # a str enum compares equal to its name


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gradient_bytes": 0, "workers": 4}, "gradient_bytes"),
        ({"gradient_bytes": -5, "workers": 4}, "gradient_bytes"),
        ({"gradient_bytes": 1.5, "workers": 4}, "gradient_bytes"),
        ({"gradient_bytes": MAX_BUDGET_BYTES + 1, "workers": 4}, "gradient_bytes"),
        ({"gradient_bytes": 100, "workers": 1}, "workers"),  # ring needs >= 2
        ({"gradient_bytes": 100, "workers": 0, "collective": "parameter_server"}, "workers"),
        ({"gradient_bytes": 100, "workers": 4, "collective": "allreduce"}, "collective"),
        ({"gradient_bytes": 100, "workers": 4, "role": "server"}, "role"),  # not PS
        (
            {"gradient_bytes": 100, "workers": 4, "collective": "parameter_server",
             "role": "chief"},
            "role",
        ),
        (
            {"gradient_bytes": 100, "workers": 4, "collective": "parameter_server",
             "servers": 0},
            "servers",
        ),
        (  # the server's budget G * N / servers would exceed the kernel's limit
            {"gradient_bytes": MAX_BUDGET_BYTES, "workers": 4,
             "collective": "parameter_server", "role": "server"},
            "gradient_bytes",
        ),
    ],
)
def test_job_validation(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as info:
        JobDescription(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert "\n" not in str(info.value)


def test_parameter_server_single_worker_is_valid() -> None:
    assert JobDescription(10, 1, "parameter_server").bytes_per_iteration() == 10


# --- parse_bytes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("123", 123),
        ("123B", 123),
        ("64k", 64_000),
        ("64K", 64_000),
        ("64kB", 64_000),
        ("10MB", 10_000_000),
        ("10M", 10_000_000),
        ("10 mb", 10_000_000),
        ("1.5GB", 1_500_000_000),
        ("2T", 2_000_000_000_000),
        ("4MiB", 4 * 1024 * 1024),
        ("1KiB", 1024),
        ("0.5GiB", 1 << 29),
        ("1TiB", 1 << 40),
        (" 7 ", 7),
        (".5k", 500),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text, "--budget") == expected


@pytest.mark.parametrize(
    "text",
    ["", "abc", "10XB", "10 M B", "1e6", "0", "0MB", "-5", "-1MB", "0.1KiB", "1.5", "nan", "--3"],
)
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_bytes(text, "--budget")
    assert info.value.field == "--budget"
    assert "\n" not in str(info.value)


def test_parse_bytes_rejects_non_string() -> None:
    with pytest.raises(SpecError, match="^gradient: "):
        parse_bytes(10, "gradient")  # type: ignore[arg-type]


# --- BudgetLearner -----------------------------------------------------------------


def test_learner_none_before_min_samples() -> None:
    learner = BudgetLearner()
    for _ in range(4):
        learner.add(10 * MB)
        assert learner.learned() is None
    learner.add(10 * MB)
    assert learner.learned() == 10 * MB


def test_learner_ignores_non_positive_samples() -> None:
    learner = BudgetLearner()
    for sample in (0, -3, 0, 10, 10):
        learner.add(sample)
    assert learner.samples == [10, 10]


def test_learner_keeps_last_window() -> None:
    learner = BudgetLearner(window=5, min_samples=3)
    for sample in range(1, 11):
        learner.add(sample)
    assert learner.samples == [6, 7, 8, 9, 10]


def test_learner_converges_to_median_with_noise() -> None:
    rng = random.Random(1234)
    learner = BudgetLearner()
    samples = [round(10 * MB * rng.uniform(0.98, 1.02)) for _ in range(20)]
    for s in samples:
        learner.add(s)
    learned = learner.learned()
    assert learned is not None
    last = sorted(samples[-8:])
    assert learned == round((last[3] + last[4]) / 2)  # median of the last window
    assert abs(learned - 10 * MB) <= 0.02 * 10 * MB


def test_learner_outlier_does_not_move_median_much() -> None:
    learner = BudgetLearner()
    for s in (100, 101, 99, 100, 5000, 100, 102, 98):
        learner.add(s)
    assert learner.learned() == 100


def test_learner_bimodal_stays_none() -> None:
    """A full window of alternating sizes has median 15 MB and MAD 5 MB (33 %): None."""
    learner = BudgetLearner()
    for i in range(32):
        learner.add(10 * MB if i % 2 else 20 * MB)
        if len(learner.samples) == learner.window:
            assert learner.learned() is None


def test_learner_bimodal_partial_window_reports_majority() -> None:
    """Known limit of median/MAD: with 5 samples (3 x 20 MB, 2 x 10 MB) the MAD is 0,
    so the majority mode is reported until the window holds an even split."""
    learner = BudgetLearner()
    for i in range(5):
        learner.add(10 * MB if i % 2 else 20 * MB)
    assert learner.learned() == 20 * MB
    learner.add(10 * MB)
    assert learner.learned() is None


def test_learner_recovers_after_reset() -> None:
    learner = BudgetLearner()
    for i in range(8):
        learner.add(10 * MB if i % 2 else 20 * MB)
    assert learner.learned() is None
    learner.reset()
    assert learner.samples == []
    for _ in range(5):
        learner.add(30 * MB)
    assert learner.learned() == 30 * MB


def test_learner_spread_threshold_is_inclusive() -> None:
    learner = BudgetLearner(window=5, min_samples=5, max_spread=0.10)
    for s in (90, 110, 100, 90, 110):  # median 100, MAD 10 == 0.10 * 100
        learner.add(s)
    assert learner.learned() == 100
    learner.add(120)  # window now (110, 100, 90, 110, 120): median 110, MAD 10 <= 11
    assert learner.learned() == 110


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_samples": 2}, "min_samples"),
        ({"window": 4, "min_samples": 5}, "window"),
        ({"max_spread": 0.0}, "max_spread"),
        ({"max_spread": 1.0}, "max_spread"),
        ({"max_spread": -0.1}, "max_spread"),
    ],
)
def test_learner_validation(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(SpecError, match=f"^{field}: "):
        BudgetLearner(**kwargs)  # type: ignore[arg-type]

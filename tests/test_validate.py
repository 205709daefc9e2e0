"""The one validator module: what it accepts, what it refuses, and how it says so."""

from __future__ import annotations

import math

import pytest

from mltcp.core import validate
from mltcp.core.errors import SpecError

NOT_NUMBERS = [True, False, None, "1", [1], math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_number_refuses_bools_strings_nan_and_infinities(value: object) -> None:
    with pytest.raises(SpecError) as err:
        validate.number(value, "f", -1e9, 1e9, "1")
    assert err.value.field == "f" and "e.g. 1" in err.value.fix


def test_number_bounds_open_and_closed() -> None:
    assert validate.number(0, "f", 0, 1) == 0.0
    assert validate.number(1, "f", 0, 1) == 1.0
    with pytest.raises(SpecError, match="> 0"):
        validate.number(0, "f", 0, 1, lo_open=True)
    with pytest.raises(SpecError, match="<= 1"):
        validate.number(1.0000001, "f", 0, 1)
    with pytest.raises(SpecError):
        validate.number(10**400, "f", 0, 1e300)        # an int too large for a float
    with pytest.raises(SpecError) as err:
        validate.number(5, "f", 0, 1, fix="use a fraction")
    assert err.value.fix == "use a fraction"


@pytest.mark.parametrize("value", [True, 1.0, "3", None])
def test_integers_are_integers(value: object) -> None:
    with pytest.raises(SpecError, match="must be an integer"):
        validate.integer(value, "n", 0, 10)
    with pytest.raises(SpecError, match="must be an integer"):
        validate.at_least(value, "n", 0, "fix")


def test_integer_ranges_and_unbounded_counts() -> None:
    assert validate.integer(3, "n", 1, 3) == 3
    with pytest.raises(SpecError, match="between 1 and 3"):
        validate.integer(4, "n", 1, 3)
    assert validate.at_least(2**70, "n", 0, "fix") == 2**70
    with pytest.raises(SpecError, match=">= 1"):
        validate.at_least(0, "n", 1, "fix")
    assert validate.port(65535, "p") == 65535
    with pytest.raises(SpecError):
        validate.port(0, "p")


def test_finite_has_no_range_but_no_nan() -> None:
    assert validate.finite(-1e300, "x", "fix") == -1e300
    for bad in (math.nan, math.inf, True, "1"):
        with pytest.raises(SpecError, match="finite"):
            validate.finite(bad, "x", "fix")


@pytest.mark.parametrize(("text", "expected"), [
    ("10MB", 10_000_000), ("4MiB", 4 * 2**20), ("1.5GB", 1_500_000_000), ("64k", 64_000),
    ("123", 123), (" 2 GiB ", 2 * 2**30)])
def test_sizes(text: str, expected: int) -> None:
    assert validate.parse_bytes(text, "size") == expected
    assert validate.size(text, "size", "10MB") == expected


@pytest.mark.parametrize("text", ["0", "-1MB", "0.1KiB", "lots", "1XB", ""])
def test_bad_sizes_name_the_field(text: str) -> None:
    with pytest.raises(SpecError) as err:
        validate.parse_bytes(text, "budget")
    assert err.value.field == "budget"
    with pytest.raises(SpecError):
        validate.size(True, "budget", "10MB")


def test_seeds_names_and_choices() -> None:
    assert validate.seeds("0-3") == (0, 1, 2, 3)
    assert validate.seeds("5,1,5") == (5, 1)
    for bad in ("a-b", "", "-1"):
        with pytest.raises(SpecError, match="seeds"):
            validate.seeds(bad)
    import re

    assert validate.name("ok-1", "name", re.compile(r"[a-z0-9-]+"), "a-z", "a") == "ok-1"
    with pytest.raises(SpecError, match="not a valid name"):
        validate.name("No!", "name", re.compile(r"[a-z0-9-]+"), "a-z", "a")
    assert validate.choice("x", "c", ("x", "y")) == "x"
    with pytest.raises(SpecError, match="use one of: x, y"):
        validate.choice("z", "c", ("x", "y"))
    assert validate.flag(True, "b", "b = true") is True
    with pytest.raises(SpecError):
        validate.flag(1, "b", "b = true")


def test_job_names_are_the_datapaths() -> None:
    assert validate.job_name("resnet.a-1_b", "job") == "resnet.a-1_b"
    for bad in ("", "-lead", "a b", "x" * 33):
        with pytest.raises(SpecError, match=r"^job: .*; use 1-32 letters"):
            validate.job_name(bad, "job")
    with pytest.raises(SpecError, match=r"^job: must be a string"):
        validate.job_name(7, "job")

"""The command line's input checks: every bad value is one line naming the flag and the
fix (exit 2), refused before anything touches the kernel, a NIC or a file; no root
needed.  And the exit codes the CLI documents."""

from __future__ import annotations

import pytest

from mltcp.cli import EXIT_BAD_INPUT, main

BAD = [
    (["status", "--watch", "-1"], "--watch"),
    (["status", "--watch", "0"], "--watch"),
    (["status", "--watch", "nan"], "--watch"),
    (["agent", "--interval", "0"], "--interval"),
    (["agent", "--metrics-port", "70000"], "--metrics-port"),
    (["agent", "--metrics-port", "http"], "--metrics-port"),
    (["job", "attach", "j", "--budget", "1MB", "--port", "1", "--slope", "nan"], "--slope"),
    (["job", "attach", "j", "--budget", "1MB", "--port", "1", "--intercept", "inf"],
     "--intercept"),
    (["job", "attach", "j", "--budget", "1MB", "--port", "1", "--cap", "x"], "--cap"),
    (["job", "attach", "j", "--budget", "1MB", "--port", "1", "--gap-ms", "nan"], "--gap-ms"),
    (["job", "attach", "j", "--budget", "1MB", "--port", "1", "--stale-s", "inf"],
     "--stale-s"),
    (["job", "attach", "j", "--gradient-bytes", "1MB", "--workers", "0", "--port", "1"],
     "--workers"),
    (["job", "attach", "j", "--budget", "1MB", "--servers", "0", "--port", "1"], "--servers"),
    (["job", "attach", "j", "--budget", "1MB", "--port", "0"], "--port"),
    (["job", "attach", "j", "--budget", "1MB", "--local-port", "65536"], "--local-port"),
    (["dcqcn", "run", "--budget", "1MB", "--duration-s", "nan"], "--duration-s"),
    (["dcqcn", "run", "--budget", "1MB", "--duration-s", "-1"], "--duration-s"),
    (["dcqcn", "run", "--budget", "1MB", "--poll-ms", "0"], "--poll-ms"),
    (["dcqcn", "run", "--budget", "1MB", "--gap-ms", "-5"], "--gap-ms"),
    (["dcqcn", "run", "--budget", "1MB", "--f-step", "2"], "--f-step"),
    (["run", "compatible-pair", "--out", "x", "--parallel", "0"], "--parallel"),
    (["compare", "compatible-pair", "--out", "x", "--seed", "-1"], "--seed"),
    (["sweep", "compatible-pair", "--out", "x", "--param", "slope=1", "--workers", "0"],
     "--workers"),
    (["demo", "--live", "--iterations", "0"], "--iterations"),
    (["demo", "--live", "--rate-mbit", "0"], "--rate-mbit"),
]


@pytest.mark.parametrize(("argv", "flag"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_value_is_one_line_naming_the_flag(argv: list[str], flag: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mltcp: error: ") and flag in err, err
    assert "Traceback" not in err


def test_library_checks_reach_the_command_line_as_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Values the flag's type accepts but the library refuses (slope 100 is a number, but
    over F's bound) come back from the library's own check, still one line, exit 2."""
    assert main(["sweep", "compatible-pair", "--out", "x", "--param", "compute_ms=nan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "param.compute_ms" in err
    assert main(["dcqcn", "run", "--iface", "x", "--budget", "1MB", "--slope", "100",
                 "--backend", "defaults", "--advise"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "slope" in err


def test_an_unknown_command_or_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["nosuch"], ["status", "--nosuch"], ["run"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--help" in err, err

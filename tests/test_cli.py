"""The command line's input checks: every bad value is one line naming the flag and the
fix (exit 2), refused before anything touches the kernel, a NIC or a file; no root
needed.  And the exit codes the CLI documents; ``--version`` and ``python -m mltcp``."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mltcp
from mltcp.cli import EXIT_BAD_INPUT, main
from mltcp.host import build, maps

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
    (["sweep", "compatible-pair", "--out", "x", "--param", "slope=1", "--parallel", "0"],
     "--parallel"),
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


def _version(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_version_names_the_package_and_the_datapath_abi_and_digest(
        capsys: pytest.CaptureFixture[str]) -> None:
    out = _version(capsys)
    src = build.kernel_source_dir()
    assert out.splitlines()[0] == f"mltcp {mltcp.__version__}"
    line = re.fullmatch(r"datapath: eBPF ABI (\d+), digest ([0-9a-f]{16}) \((.+)\)\n",
                        out.split("\n", 1)[1])
    assert line, out
    assert int(line[1]) == build.abi_version(src) == maps.ABI_VERSION
    assert line[2] == build.datapath_digest(src)


def test_version_follows_the_sources_in_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Another ABI in mltcp.h: another ABI and digest, and no pre-built object matches."""
    before = _version(capsys)
    src = tmp_path / "kernel"
    shutil.copytree(build.kernel_source_dir(), src, ignore=shutil.ignore_patterns("build"))
    header = src / build.SHARED_HEADER
    text = header.read_text()
    header.write_text(re.sub(r"(#define MLTCP_ABI_VERSION) \d+", r"\1 99", text))
    monkeypatch.setenv("MLTCP_KERNEL_SRC", str(src))
    after = _version(capsys)
    assert "eBPF ABI 99, " in after and "(compiled with clang at load)" in after
    assert re.search(r"digest (\w+)", after)[1] != re.search(r"digest (\w+)", before)[1]
    monkeypatch.setenv("MLTCP_KERNEL_SRC", str(tmp_path / "nothing"))
    assert _version(capsys).splitlines()[1].startswith("datapath: eBPF objects unknown: ")


def test_python_m_mltcp_is_the_mltcp_command() -> None:
    """``python -m mltcp`` runs the same main; ``--version`` reads files only (no libbpf,
    no numpy), so it works anywhere, without root."""
    probe = ("import runpy, sys\n"
             "sys.argv = ['mltcp', '--version']\n"
             "try:\n"
             "    runpy.run_module('mltcp', run_name='__main__')\n"
             "except SystemExit as e:\n"
             "    print(sorted(m for m in sys.modules if m.startswith(('mltcp.host.libbpf', "
             "'numpy'))), e.code)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    *version, loaded = done.stdout.splitlines()
    assert version[0] == f"mltcp {mltcp.__version__}" and version[1].startswith("datapath: ")
    assert loaded == "[] 0"
    helped = subprocess.run([sys.executable, "-m", "mltcp", "job", "--help"],
                            capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: mltcp job")

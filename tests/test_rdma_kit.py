"""The RoCE deployment kit (rdma/): its systemd unit and preset files, run for real.

Every preset is expanded into the unit's ExecStart the way systemd expands it (%i/%I,
``${VAR}`` as one word, ``$VAR`` split at whitespace), and the resulting arguments go
through the project's own command line (argparse included) against a fake NIC tree built
by tests/test_dcqcn_tuner.py's helpers; only test-harness options are added. Then the
unit's ExecStopPost runs the same way, and every knob must be back as it was. A preset
with a misspelt or abbreviated option, or a unit whose commands drift from the CLI,
fails here: the kit cannot rot unnoticed.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mltcp.cli import EXIT_BAD_INPUT, EXIT_CAPABILITY, build_parser
from mltcp.cli import main as cli_main
from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.dcqcn.knobs import KNOB_BY_NAME
from mltcp.core.dcqcn.policy import DcqcnPolicy, preset
from mltcp.core.validate import parse_bytes
from mltcp.host.dcqcn.snapshot import default_state_dir
from tests.test_dcqcn_tuner import IFACE, LAYOUTS, tree, values

REPO = Path(__file__).resolve().parent.parent
KIT = REPO / "rdma"
UNIT = KIT / "mltcp-dcqcn@.service"
PRESETS = sorted((KIT / "presets").glob("*.env"))
MLTCP = "/usr/local/bin/mltcp"
# What the harness adds; a preset must not set them (they would not reach the restores,
# or would end the service).
HARNESS_ONLY = ("--root", "--state-dir", "--duration-s")
OLD_NS = 1_000_000_000  # knob files' mtime before a run: any write moves it


# -- systemd's formats, parsed the way systemd reads them ---------------------------

def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections of key -> values, in order (systemd allows a key many times; an empty
    assignment resets the list). Comments (# ;) and trailing-backslash continuations."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines, "").strip()
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{line!r} outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"not KEY=VALUE: {line!r}"
        values = current.setdefault(key.strip(), [])
        if value.strip():
            values.append(value.strip())
        else:
            values.clear()
    return sections


def parse_env(text: str) -> dict[str, str]:
    """An EnvironmentFile: KEY=VALUE lines, '#'/';' comment lines, optional quotes."""
    env: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key), \
            f"line {n}: not KEY=VALUE: {raw!r}"
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            quote, value = value[0], value[1:-1]
            if quote == '"':  # backslash escapes; single quotes are literal
                value = re.sub(r"\\(.)", r"\1", value)
        env[key] = value
    return env


def unescape(instance: str) -> str:
    """%I: the instance with systemd's escaping undone ('-' is '/', \\xNN a byte)."""
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)),
                  instance.replace("-", "/"))


def specifiers(text: str, instance: str) -> str:
    def one(m: re.Match[str]) -> str:
        spec = m.group(1)
        if spec == "%":
            return "%"
        assert spec in "iI", f"specifier %{spec} is not modelled by this test"
        return instance if spec == "i" else unescape(instance)
    return re.sub(r"%(.)", one, text)


def expand_exec(line: str, env: dict[str, str], instance: str) -> list[str]:
    """An Exec*= line as systemd runs it: specifiers, words, then variables: a word that
    is exactly $VAR becomes the value split at whitespace (zero or more words); ${VAR}
    is replaced in place and its word stays one argument (an unset VAR is empty)."""
    line = specifiers(line, instance)
    assert line[0] not in "-@:+!", f"unexpected prefix in {line!r}"
    argv: list[str] = []
    for word in line.split():  # the kit's Exec lines quote nothing
        if m := re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word):
            argv += env.get(m.group(1), "").split()
            continue
        word = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""),
                      word)
        assert "$" not in word, f"systemd would not expand {word!r}"
        argv.append(word)
    return argv


# -- the kit, read ------------------------------------------------------------------

def service() -> dict[str, list[str]]:
    return parse_unit(UNIT.read_text())["Service"]


def command(key: str, env: dict[str, str], iface: str = IFACE) -> list[str]:
    """The unit's one Exec line for `key`, expanded, without /usr/local/bin/mltcp."""
    lines = service()[key]
    assert len(lines) == 1, f"{key}: {lines}"
    argv = expand_exec(lines[0], env, iface)
    assert argv[0] == MLTCP, argv
    return argv[1:]


def run_subparser() -> argparse.ArgumentParser:
    def sub(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
        [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return action.choices[name]
    return sub(sub(build_parser(), "dcqcn"), "run")


def inexact_options(args: list[str]) -> list[str]:
    """Options not spelled exactly as `mltcp dcqcn run --help` has them. argparse takes
    an unambiguous prefix (--adv for --advise), which a later option can make ambiguous;
    an unknown one argparse rejects by itself (the runs below check that too)."""
    known = run_subparser()._option_string_actions
    return [a for a in args if a.startswith("-") and a.split("=")[0] not in known]


# -- running it ---------------------------------------------------------------------

def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`mltcp ARGV` in this process, argparse's exits included: (rc, stdout, stderr)."""
    try:
        rc = cli_main(argv)
    except SystemExit as exc:  # argparse: an unknown option, a missing value
        rc = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return rc, out, err


def write_count(path: Path, total: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{total}\n")
    os.replace(tmp, path)  # atomically: the tuner never reads half a number


class Traffic:
    """A thread moving the byte counter by an eighth of the budget every 2 ms, up to
    `limit` bytes if given (then the counter stays there: the compute phase)."""

    def __init__(self, path: Path, budget: int, limit: int | None = None) -> None:
        self.path, self.step, self.limit = path, max(budget // 8, 1), limit
        self.total = 0
        write_count(path, 0)
        self.done = threading.Event()  # the limit is on disk
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.total += self.step
            if self.limit is not None and self.total >= self.limit:
                write_count(self.path, self.limit)
                self.done.set()
                return
            write_count(self.path, self.total)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def knob_tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every regular file under root: contents and mtime (a write moves the mtime)."""
    return {name: (data, (root / name).stat().st_mtime_ns) for name, data in tree(root).items()}


def fake_nic(root: Path, layout: str) -> None:
    LAYOUTS[layout](root)
    for name in tree(root):
        os.utime(root / name, ns=(OLD_NS, OLD_NS))


def harness_run(tmp_path: Path, counter: Path, duration_s: float) -> list[str]:
    return ["--root", str(tmp_path / "root"), "--state-dir", str(tmp_path / "state"),
            "--duration-s", str(duration_s), "--poll-ms", "1", "--counter", f"file:{counter}"]


def harness_restore(tmp_path: Path) -> list[str]:
    return ["--state-dir", str(tmp_path / "state")]  # the root: the one in the snapshot


def aggressiveness(args: argparse.Namespace) -> Aggressiveness:
    """F as `mltcp dcqcn run` builds it from --preset and the overrides."""
    agg = preset(args.preset or "tuned").agg
    return Aggressiveness(slope=agg.slope if args.slope is None else args.slope,
                          intercept=agg.intercept if args.intercept is None else args.intercept,
                          cap=agg.cap if args.cap is None else args.cap)


def writes_knobs(args: argparse.Namespace) -> bool:
    """Whether a run with these options changes knobs under traffic (F not always 1)."""
    agg = aggressiveness(args)
    return not args.advise and not (agg.slope == 0 and agg.intercept == 1
                                    and args.base == "current")


def knobs_at(args: argparse.Namespace, ratio: float) -> dict[str, int]:
    """The knobs a run writes at this bytes_ratio on a NIC at the mlx5 defaults."""
    agg = aggressiveness(args)
    policy = DcqcnPolicy(agg, mode=args.mode, f_step=args.f_step)
    base = {n: KNOB_BY_NAME[n].default for n in policy.knobs}
    return policy.targets({n: v for n, v in base.items() if v is not None}, agg(ratio))


# -- the unit -----------------------------------------------------------------------

def test_unit_restores_before_and_after_and_runs_the_tuner() -> None:
    unit = parse_unit(UNIT.read_text())
    svc = unit["Service"]
    assert svc["EnvironmentFile"] == ["/etc/mltcp/dcqcn/%I.env"]  # no '-': required
    assert svc["ExecStartPre"] == [f"{MLTCP} dcqcn restore --iface %I"]
    assert svc["ExecStopPost"] == [f"{MLTCP} dcqcn restore --iface %I"]
    assert svc["ExecStart"] == [f"{MLTCP} dcqcn run --iface %I "
                                "--budget ${MLTCP_DCQCN_BUDGET} $MLTCP_DCQCN_ARGS"]
    assert svc["KillSignal"] == ["SIGTERM"] and svc["Restart"] == ["on-failure"]
    assert int(svc["RestartSec"][0]) > 0 and int(svc["TimeoutStopSec"][0]) >= 10
    # the tuner exits 128 + SIGTERM after restoring: a clean stop, not a failure
    assert str(128 + signal.SIGTERM) in svc["SuccessExitStatus"][0].split()
    # bad input would fail again: no restart loop; a missing capability is retried (knobs
    # that appear after the netdev at boot), bounded by the start limit
    assert set(svc["RestartPreventExitStatus"][0].split()) == {str(EXIT_BAD_INPUT)}
    assert str(EXIT_CAPABILITY) not in svc["RestartPreventExitStatus"][0].split()
    unit_section = unit["Unit"]
    assert int(unit_section["StartLimitBurst"][0]) > 0 and unit_section["StartLimitIntervalSec"]
    assert unit["Unit"]["BindsTo"] == unit["Unit"]["After"] == \
        ["sys-subsystem-net-devices-%i.device"]  # the escaped instance names the device
    assert unit["Install"]["WantedBy"] == ["multi-user.target sys-subsystem-net-devices-%i.device"]


def test_unit_state_directory_is_the_tuners_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLTCP_DCQCN_STATE_DIR", raising=False)
    [state] = service()["StateDirectory"]
    assert Path("/var/lib") / state == default_state_dir()


def test_unit_expands_an_escaped_interface_name() -> None:
    env = {"MLTCP_DCQCN_BUDGET": "1MB", "MLTCP_DCQCN_ARGS": "--preset paper  --advise"}
    instance = r"eth\x2droce"  # systemctl start mltcp-dcqcn@$(systemd-escape eth-roce)
    assert command("ExecStart", env, instance) == \
        ["dcqcn", "run", "--iface", "eth-roce", "--budget", "1MB", "--preset", "paper",
         "--advise"]
    assert specifiers(parse_unit(UNIT.read_text())["Unit"]["BindsTo"][0], instance) == \
        r"sys-subsystem-net-devices-eth\x2droce.device"


def test_start_pre_restore_is_harmless_without_a_snapshot(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake_nic(tmp_path / "root", "sysfs")
    before = knob_tree(tmp_path / "root")
    rc, out, err = cli(command("ExecStartPre", {}) + harness_restore(tmp_path), capsys)
    assert rc == 0, out + err
    assert "nothing to restore" in out
    assert knob_tree(tmp_path / "root") == before


# -- the presets --------------------------------------------------------------------

def test_the_kit_has_the_four_presets() -> None:
    names = {p.stem for p in PRESETS}
    assert {"tuned", "paper", "advise", "mlx5-default"} <= names
    readme = (KIT / "README.md").read_text()
    for p in PRESETS:
        assert f"presets/{p.name}" in readme, f"{p.name} is not in rdma/README.md"


def test_each_preset_does_what_its_name_says() -> None:
    def run(name: str) -> argparse.Namespace:
        env = parse_env((KIT / "presets" / f"{name}.env").read_text())
        return parse_run(command("ExecStart", env))

    tuned, paper, advise, control = (run(n) for n in ("tuned", "paper", "advise",
                                                      "mlx5-default"))
    for args in (tuned, paper, advise, control):
        assert args.mode == "timer" and args.base == "current"
    assert aggressiveness(tuned) == preset("tuned").agg and not tuned.advise
    assert aggressiveness(paper) == preset("paper").agg and not paper.advise
    assert (paper.slope, paper.intercept) == (None, None)  # exactly the preset's 0.25 + 1.75 r
    assert advise.advise  # writes nothing
    agg = aggressiveness(control)
    assert (agg.slope, agg.intercept) == (0, 1) and not control.advise
    assert not writes_knobs(control)  # F = 1 on the NIC's own values


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_preset_file_is_a_commented_env_file(path: Path) -> None:
    text = path.read_text()
    env = parse_env(text)
    assert set(env) >= {"MLTCP_DCQCN_BUDGET", "MLTCP_DCQCN_ARGS"}, env
    assert set(env) <= {"MLTCP_DCQCN_BUDGET", "MLTCP_DCQCN_ARGS", "MLTCP_DCQCN_STATE_DIR"}
    for key, value in env.items():  # systemd has no comments after a value
        assert "#" not in value and "'" not in value and '"' not in value, (key, value)
    assert parse_bytes(env["MLTCP_DCQCN_BUDGET"], "budget") > 0
    assert "Use when" in text and "2(N-1)/N" in text
    args = env["MLTCP_DCQCN_ARGS"].split()
    assert inexact_options(args) == []
    assert not [a for a in args if a.split("=")[0] in HARNESS_ONLY]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_preset_runs_through_the_unit_and_stop_restores(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], path: Path, layout: str) -> None:
    root = tmp_path / "root"
    fake_nic(root, layout)
    before = knob_tree(root)
    env = parse_env(path.read_text())

    rc, out, err = cli(command("ExecStartPre", env) + harness_restore(tmp_path), capsys)
    assert rc == 0 and "nothing to restore" in out, out + err

    argv = command("ExecStart", env)
    counter = tmp_path / "tx_bytes"
    with Traffic(counter, parse_bytes(env["MLTCP_DCQCN_BUDGET"], "budget")) as traffic:
        rc, out, err = cli(argv + harness_run(tmp_path, counter, 0.25), capsys)
    assert rc == 0, f"{' '.join(argv)} exited {rc}:\n{out}{err}"
    options = parse_run(argv)  # what the preset asked for
    assert traffic.total > 0
    assert re.search(r"iteration +\d+: [\d,.]+ MB sent", out), out  # it tracked iterations
    if options.advise:
        assert "would set rpg_" in out and "nothing was written" in out, out
        assert knob_tree(root) == before  # not one knob file was written, not even back
        assert not (tmp_path / "state").exists()  # and no snapshot was made
    elif writes_knobs(options):
        assert re.search(r": set rpg_\w+ \d+ -> \d+", out), out
        assert re.search(r"restored .*; \d+ knobs were unchanged", out), out  # on exit
    else:  # F = 1 on the NIC's own values: standard DCQCN, nothing written
        assert " set rpg_" not in out, out
        assert knob_tree(root) == before

    rc, out, err = cli(command("ExecStopPost", env) + harness_restore(tmp_path), capsys)
    assert rc == 0, out + err
    assert tree(root) == {name: data for name, (data, _) in before.items()}
    assert not (tmp_path / "state" / f"{IFACE}.json").exists()


# -- a crash, a stop, a broken preset -----------------------------------------------

def parse_run(argv: list[str]) -> argparse.Namespace:
    """What an `mltcp dcqcn run` command line asks for (argparse's exit: a test failure)."""
    try:
        return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"argparse refuses {argv}")


class Tuner:
    """`mltcp ARGV` in a process of its own, its output collected as it comes."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "mltcp.cli", *argv], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self) -> str:
        self._reader.join(timeout=30)
        return "".join(self.lines)

    def wait_for(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 30  # a safety stop for a hung child, not a measurement
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"tuner exited {self.proc.returncode}:\n{self.output()}")
            if done():
                return
            time.sleep(0.005)
        self.proc.kill()
        pytest.fail(f"the tuner never got there:\n{self.output()}")

    def iterations(self) -> int:
        return sum(bool(re.search(r"iteration +\d+: .* MB sent", line)) for line in self.lines)


def holds(root: Path, knobs: dict[str, int]) -> bool:
    try:
        return values(root, *knobs) == list(knobs.values())
    except ValueError:  # read between the tuner's truncate and write
        return False


def start_and_tune(tmp_path: Path, env: dict[str, str]) -> Tuner:
    """The unit's ExecStart in a process of its own, fed 2.5 budgets from the moment it
    waits for traffic (two whole iterations, then half of one), until the knobs hold
    F(0.5): the counter then stays put, so they stay so until the tuner is stopped."""
    counter = tmp_path / "tx_bytes"
    write_count(counter, 0)
    argv = command("ExecStart", env)
    options = parse_run(argv)
    tuner = Tuner(argv + harness_run(tmp_path, counter, 60))
    tuner.wait_for(lambda: "waiting for RDMA traffic" in "".join(tuner.lines))
    budget = parse_bytes(env["MLTCP_DCQCN_BUDGET"], "budget")
    final = knobs_at(options, 0.5)
    with Traffic(counter, budget, limit=2 * budget + budget // 2) as traffic:
        if writes_knobs(options):
            tuner.wait_for(lambda: traffic.done.is_set()
                           and holds(tmp_path / "root", final))
        else:
            tuner.wait_for(lambda: traffic.done.is_set() and tuner.iterations() >= 2)
    return tuner


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_after_a_crash_the_unit_restores_the_knobs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], path: Path) -> None:
    root, snapshot = tmp_path / "root", tmp_path / "state" / f"{IFACE}.json"
    fake_nic(root, "debugfs")
    before = tree(root)
    env = parse_env(path.read_text())
    options = parse_run(command("ExecStart", env))
    writes = writes_knobs(options)
    tuner = start_and_tune(tmp_path, env)
    tuner.proc.kill()  # SIGKILL, or the power went: the tuner restores nothing
    assert tuner.proc.wait() == -signal.SIGKILL
    assert snapshot.exists() != options.advise  # advice only: never a snapshot
    assert (tree(root) != before) == writes, tuner.output()
    # power loss: ExecStopPost never ran; the next start's ExecStartPre puts them back
    rc, out, err = cli(command("ExecStartPre", env) + harness_restore(tmp_path), capsys)
    assert rc == 0, out + err
    if writes:
        assert "restored rpg_" in out, out
    else:
        assert "nothing to restore" in out or "restored nothing" in out, out
    assert tree(root) == before and not snapshot.exists()
    # and a crash that systemd saw: ExecStopPost finds nothing left to do, harmlessly
    rc, out, err = cli(command("ExecStopPost", env) + harness_restore(tmp_path), capsys)
    assert rc == 0 and "nothing to restore" in out, out + err
    assert tree(root) == before


def test_systemctl_stop_is_a_clean_exit_and_restores(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, snapshot = tmp_path / "root", tmp_path / "state" / f"{IFACE}.json"
    fake_nic(root, "sysfs")
    before = tree(root)
    env = parse_env((KIT / "presets" / "tuned.env").read_text())
    tuner = start_and_tune(tmp_path, env)
    assert snapshot.exists() and tree(root) != before
    tuner.proc.send_signal(signal.SIGTERM)  # KillSignal=
    rc = tuner.proc.wait(timeout=int(service()["TimeoutStopSec"][0]))
    output = tuner.output()
    assert str(rc) in service()["SuccessExitStatus"][0].split(), output
    assert "SIGTERM: stopping" in output and "restored rpg_" in output, output
    assert tree(root) == before and not snapshot.exists()
    rc, out, err = cli(command("ExecStopPost", env) + harness_restore(tmp_path), capsys)
    assert rc == 0 and "nothing to restore" in out, out + err


def test_a_broken_preset_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake_nic(tmp_path / "root", "sysfs")
    before = knob_tree(tmp_path / "root")
    counter = tmp_path / "tx_bytes"
    write_count(counter, 0)
    harness = harness_run(tmp_path, counter, 0.01)
    prevent = service()["RestartPreventExitStatus"][0].split()

    def run(env_text: str) -> tuple[int, str]:
        rc, out, err = cli(command("ExecStart", parse_env(env_text)) + harness, capsys)
        return rc, out + err

    # a misspelt option: argparse (the real one, through mltcp's main) refuses it
    rc, out = run('MLTCP_DCQCN_BUDGET=1MB\nMLTCP_DCQCN_ARGS="--preset tuned --mdoe timer"\n')
    assert rc == EXIT_BAD_INPUT and "unrecognized arguments: --mdoe" in out, out
    assert str(rc) in prevent  # and systemd would not restart it in a loop
    rc, out = run('MLTCP_DCQCN_BUDGET=1MB\nMLTCP_DCQCN_ARGS="--preset papr"\n')
    assert rc == EXIT_BAD_INPUT and "invalid choice: 'papr'" in out, out
    # no budget: ${MLTCP_DCQCN_BUDGET} is one empty argument, which is refused
    rc, out = run('MLTCP_DCQCN_ARGS="--advise"\n')
    assert rc == EXIT_BAD_INPUT and "budget" in out, out
    # an abbreviation argparse accepts today (--adv) is caught by the spelling check
    assert inexact_options(["--preset", "tuned", "--adv", "--mode=timer"]) == ["--adv"]
    assert knob_tree(tmp_path / "root") == before  # none of them got as far as a knob


def test_env_parser_reads_what_systemd_reads() -> None:
    env = parse_env("# comment\n; also a comment\n\nA=1\n B = two words \nC=\"x \\\" y\"\n"
                    "D='$literal'\nE=\n")
    assert env == {"A": "1", "B": "two words", "C": 'x " y', "D": "$literal", "E": ""}
    with pytest.raises(AssertionError):
        parse_env("--preset tuned\n")
    assert expand_exec("/x a ${A} $B ${E} $E", {"A": "1 2", "B": "3  4", "E": ""}, "i") == \
        ["/x", "a", "1 2", "3", "4", ""]

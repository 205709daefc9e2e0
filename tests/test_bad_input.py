"""Bad input, table-driven: each row is a command line (and the files it reads), the exit
code it must end with and a fragment (the flag or field) its one line on stderr must
name.  The real CLI runs in a fresh process, unprivileged (as root the rows drop to
nobody; rows marked ``root`` are what only root reaches), with a state directory and a
pin root of its own, so no row can touch this host's datapath.  Every answer is exactly
one line, never a traceback.

``docs/bad-input.md`` is this table with the answers, written by
``scripts/bad_input_table.py``; a test checks that every row is in it with its code.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "bad-input.md"
NOBODY = 65534
TIMEOUT_S = 120


@dataclass(frozen=True)
class Row:
    """One bad input. ``{dir}`` in argv and in file names is the row's own directory;
    ``files`` are written there first; ``note`` says what the files are, for the doc."""

    argv: tuple[str, ...]
    code: int
    says: str
    files: tuple[tuple[str, str | bytes], ...] = ()
    note: str = ""
    root: bool = False    # only root reaches this check; else the row runs as nobody

    @property
    def command(self) -> str:
        shown = " ".join(a if a and " " not in a and "!" not in a else repr(a)
                         for a in self.argv)
        return f"mltcp {shown}".replace("{dir}", "DIR")

    @property
    def cell(self) -> str:
        """The row's input as the doc shows it (unique in the table)."""
        return (f"`{self.command}`" + (f" ({self.note})" if self.note else "")
                + (" as root" if self.root else ""))


def _job_file(body: str) -> str:
    return '[[job]]\nname = "bert"\nbudget = "1MB"\nport = [29500]\n' + body


ATTACH = ("job", "attach", "x", "--port", "29500")
SWEEP = ("sweep", "compatible-pair", "--out", "{dir}/out")
FLUID = ("--backend", "fluid", "--out", "{dir}/out")
ADVISE = ("dcqcn", "run", "--iface", "x", "--backend", "defaults", "--advise")
TRUNCATED = (("state/jobs.json", '{"datapath": null, "jobs": {"a": {"id": 1'),)
SCENARIO = (REPO / "mltcp/lab/scenario/examples/compatible-pair.toml").read_text()
LONG_SCENARIO = SCENARIO.replace("compute_ms = 120", "compute_ms = 600000").replace(
    "iterations = 40", "iterations = 10000")
HUGE_CLUSTER = (REPO / "mltcp/lab/cluster/experiments/examples/small.toml").read_text() \
    .replace("leaves = 2", "leaves = 4096").replace("servers_per_leaf = 2",
                                                     "servers_per_leaf = 1024") \
    .replace("gpus_per_server = 4", "gpus_per_server = 64")
OTHER_RUN_SET = (("out/runset.json", json.dumps({
    "schema": "mltcp.runset/1", "kind": "scenario", "name": "incompatible-pair",
    "digest": "0123456789abcdef", "backend": "fluid", "schemes": {}, "seeds": [0],
    "invocations": []})),)

ROWS: list[Row] = [
    # status, agent, metrics
    Row(("status", "--watch", "-1"), 2, "--watch"),
    Row(("status", "--watch", "0"), 2, "--watch"),
    Row(("status", "--watch", "nan"), 2, "--watch"),
    Row(("-j", "status", "--watch", "0"), 2, "--watch"),
    Row(("status", "--nosuch"), 2, "--nosuch"),
    Row(("agent", "--metrics-port", "70000"), 2, "--metrics-port"),
    Row(("agent", "--metrics-port", "http"), 2, "--metrics-port"),
    Row(("agent", "--interval", "0"), 2, "--interval"),
    Row(("agent", "--metrics-addr", "999.1.1.1", "--metrics-port", "9999"), 2,
        "--metrics-addr"),
    Row(("agent", "--config", "{dir}/missing.toml"), 2, "file"),
    Row(("agent", "--signal-socket", "{dir}/plain"), 2, "--signal-socket",
        (("plain", "a file"),), "a regular file at the path"),
    Row(("agent", "--signal-socket", "{dir}/" + "s" * 110), 2, "--signal-socket",
        note="a path past a Unix socket's 107 bytes"),
    # the registry
    Row(("job", "list"), 1, "jobs.json", TRUNCATED, "a truncated jobs.json"),
    Row(("-j", "status"), 1, "jobs.json", TRUNCATED, "a truncated jobs.json"),
    Row(("metrics",), 1, "jobs.json", TRUNCATED, "a truncated jobs.json"),
    # job attach
    Row(("job", "attach", "x", "--cgroup", "/", "--budget", "1MB"), 2, "--whole-host"),
    Row(("job", "attach", "x", "--cgroup", "/", "--budget", "1MB"), 2, "--whole-host",
        root=True),
    Row(("job", "attach", "x", "--cgroup", "../../etc", "--budget", "1MB"), 2, "cgroup"),
    Row(("job", "attach", "x", "--dst", "10.0.0.0:29500", "--budget", "1MB"), 3,
        "run as root", note="valid input: only root may attach"),
    Row(("job", "attach", "x", "--dst", "10.0.0.300", "--budget", "1MB"), 2, "dst"),
    Row(("job", "attach", "x", "--dst", "fd00::1:29500", "--budget", "1MB"), 2, "dst"),
    Row(("job", "attach", "x", "--dst", "", "--budget", "1MB"), 2, "dst"),
    Row(("job", "attach", "x", "--dst", "10.0.0.1:0", "--budget", "1MB"), 2,
        "dst: '0' is out of range"),
    Row((*ATTACH, "--budget", "-5"), 2, "budget"),
    Row((*ATTACH, "--budget", "1XB"), 2, "budget"),
    Row((*ATTACH, "--budget", "2TiB"), 2, "budget"),
    Row((*ATTACH, "--budget", "1.5"), 2, "budget"),
    Row((*ATTACH, "--budget", "1MB", "--learn"), 2, "budget"),
    Row((*ATTACH, "--budget", "1MB", "--slope", "nan"), 2, "--slope"),
    Row((*ATTACH, "--budget", "1MB", "--slope", "100"), 2, "slope"),
    Row((*ATTACH, "--budget", "1MB", "--cap", "0.5"), 2, "cap"),
    Row((*ATTACH, "--budget", "1MB", "--gap-ms", "0"), 2, "gap_ms"),
    Row((*ATTACH, "--budget", "1MB", "--stale-s", "0.5"), 2, "stale_s"),
    Row((*ATTACH, "--budget", "1MB", "--cc", "vegas"), 2, "cc"),
    Row((*ATTACH, "--budget", "1MB", "--preset", "nope"), 2, "preset"),
    Row((*ATTACH, "--gradient-bytes", "1MB"), 2, "workers"),
    Row((*ATTACH, "--gradient-bytes", "1MB", "--workers", "2", "--collective", "nope"), 2,
        "collective"),
    Row((*ATTACH, "--budget", "1MB", "--local-port", "65536"), 2, "--local-port"),
    Row(("job", "attach", "x", "--budget", "1MB"), 2, "cgroup"),
    Row(("job", "attach", "bad name!", "--port", "1", "--budget", "1MB"), 2, "name"),
    Row(("-j", *ATTACH, "--budget", "1XB"), 2, "budget"),
    # other job and module commands
    Row(("job",), 2, "SUBCOMMAND"),
    Row(("job", "detach"), 2, "name"),
    Row(("job", "detach", "nosuch"), 2, "name", root=True),
    Row(("job", "signal", "nosuch"), 2, "name"),
    Row(("job", "signal", "nosuch"), 2, "name", root=True),
    Row(("load", "vegas"), 2, "module"),
    Row(("unload",), 2, "modules"),
    # apply
    Row(("apply", "{dir}/jobs.toml", "--dry-run"), 2, "job[0].bogus",
        (("jobs.toml", _job_file("bogus = 1\n")),), "a job with an unknown key"),
    Row(("apply", "{dir}/jobs.toml", "--dry-run"), 2, "job[0].slope",
        (("jobs.toml", _job_file('slope = "x"\n')),), "slope = \"x\""),
    Row(("apply", "{dir}/jobs.toml", "--dry-run"), 2, "job[0].port",
        (("jobs.toml", _job_file("").replace("[29500]", "[true]")),), "port = [true]"),
    Row(("apply", "{dir}/jobs.toml"), 2, "foo", (("jobs.toml", "foo = 1\n"),),
        "an unknown top-level key"),
    Row(("apply", "{dir}/jobs.toml"), 2, "TOML", (("jobs.toml", 'modules = ["cubic"\n'),),
        "broken TOML"),
    Row(("apply", "{dir}/jobs.toml"), 2, "UTF-8", (("jobs.toml", b"\xff\xfe"),),
        "not UTF-8"),
    Row(("apply", "{dir}/jobs.toml", "--dry-run"), 2, "declared twice",
        (("jobs.toml", _job_file("") + _job_file("").replace("29500", "29501")),),
        "one job name twice"),
    Row(("apply", "{dir}/missing.toml"), 2, "file"),
    Row(("-j", "apply", "{dir}/jobs.toml", "--dry-run"), 2, "job[0].bogus",
        (("jobs.toml", _job_file("bogus = 1\n")),), "a job with an unknown key"),
    # dcqcn
    Row(("dcqcn", "run", "--budget", "1MB", "--duration-s", "nan"), 2, "--duration-s"),
    Row(("dcqcn", "run", "--iface", "x", "--budget", "1MB", "--backend", "defaults"), 2,
        "--advise"),
    Row((*ADVISE, "--budget", "1XB"), 2, "budget"),
    Row((*ADVISE, "--budget", "1MB", "--counter", "bogus"), 2, "counter"),
    Row((*ADVISE, "--budget", "1MB", "--gap-ms", "1", "--poll-ms", "2"), 2, "gap_ms"),
    Row((*ADVISE, "--budget", "1MB", "--slope", "100"), 2, "slope"),
    Row(("dcqcn", "run", "--budget", "1MB", "--iface", "nosuch0", "--state-dir",
         "{dir}/dcqcn"), 3, "nosuch0", root=True),
    Row(("dcqcn", "probe", "--backend", "nosuch"), 2, "--backend"),
    Row(("dcqcn", "restore"), 2, "iface"),
    Row(("dcqcn",), 2, "SUBCOMMAND"),
    # the lab
    Row(("run", "{dir}/s.toml", *FLUID), 2, "jobs[0].iterations",
        (("s.toml", SCENARIO.replace("iterations = 40", "iterations = -3")),),
        "a scenario with iterations = -3"),
    Row(("run", "{dir}/s.toml", *FLUID), 2, "name", (("s.toml", '[topology]\nkind = "x"\n'),),
        "a scenario without a name"),
    Row(("run", "{dir}/s.toml", *FLUID), 2, "UTF-8", (("s.toml", b"\xff"),), "not UTF-8"),
    Row(("run", "nosuch-scenario", *FLUID), 2, "scenario"),
    Row(("run", "compatible-pair", *FLUID), 2, "--out", OTHER_RUN_SET,
        "--out holds another scenario's run set"),
    Row(("compare", "compatible-pair", *FLUID), 2, "--out", OTHER_RUN_SET,
        "--out holds another scenario's run set"),
    Row((*SWEEP, "--param", "slope=1,2", "--scheme", "cubic"), 2, "--scheme"),
    Row(("cluster", "run", "small", "--out", "{dir}/out"), 2, "--out", OTHER_RUN_SET,
        "--out holds another scenario's run set"),
    Row(("run", "compatible-pair", *FLUID, "--scheme", "nosuch"), 2, "scheme"),
    Row(("run", "compatible-pair", "--backend", "fluid", "--out", "/dev/null/x"), 2, "--out"),
    Row(("run", "compatible-pair", "--backend", "nosuch", "--out", "{dir}/out"), 2,
        "--backend"),
    Row(("run", "compatible-pair", *FLUID, "--parallel", "0"), 2, "--parallel"),
    Row(("compare", "compatible-pair", *FLUID, "--seed", "99999999999"), 2, "--seed"),
    Row((*SWEEP, "--param", "load=inf"), 2, "param.load"),
    Row((*SWEEP, "--param", "slope"), 2, "param"),
    Row((*SWEEP, "--param", "bogus=1"), 2, "bogus"),
    Row((*SWEEP, "--param", "compute_ms=nan"), 2, "param.compute_ms"),
    Row((*SWEEP, "--param", "slope=1", "--seeds", "5-1"), 2, "seeds"),
    Row((*SWEEP, "--param", "slope=1", "--backend", "dcqcn", "--f-steps", "3"), 2,
        "f-steps"),
    Row((*SWEEP, "--param", "slope=1", "--dask", "nonsense"), 2, "--dask"),
    Row(("demo", "--seeds", "x"), 2, "seeds"),
    # in range field by field, out of memory together (docs/bad-input.md, "Memory")
    Row(("run", "{dir}/s.toml", *FLUID, "--scheme", "cubic"), 2, "jobs[0].iterations x",
        (("s.toml", LONG_SCENARIO),), "compute_ms = 600000 and iterations = 10000"),
    Row(("cluster", "run", "{dir}/c.toml", "--out", "{dir}/out"), 2, "cluster.leaves x",
        (("c.toml", HUGE_CLUSTER),), "4096 leaves x 1024 servers x 64 GPUs"),
    Row((*SWEEP, "--param", "slope=1", "--seeds", "0-99999999999"), 2, "seeds"),
    Row(("demo", "--seeds", "0-99999999999"), 2, "seeds"),
    Row(("cluster", "rl-train", "--out", "{dir}/out", "--select-sets", "0-99999999999"), 2,
        "--select-sets"),
    Row(("demo", "--live", "--cc", "vegas"), 2, "--cc"),
    Row(("demo", "--live", "--iterations", "0"), 2, "--iterations"),
    Row(("demo", "--json"), 2, "--json"),
    Row(("testbed", "nuke"), 2, "action"),
    Row(("backends", "--check", "--bogus"), 2, "--bogus"),
    # -j where a command has no JSON, and no command at all
    Row(("-j", "metrics"), 2, "--json"),
    Row(("metrics", "--json"), 2, "--json"),
    Row(("-j", "agent"), 2, "--json"),
    Row(("-j", "demo"), 2, "--json"),
    Row(("-j", "dcqcn", "run", "--budget", "1MB"), 2, "--json"),
    Row(("-j", "run", "compatible-pair", *FLUID), 2, "--json"),
    Row(("-j", "nosuch"), 2, "COMMAND"),
    Row(("-j",), 2, "COMMAND"),
]


# --------------------------------------------------------------------------- second round
# Issue 25: the hosts inventory (refused in the backend's check, before any SSH) and a
# job's workload table (refused when the scenario is read, on every backend).

HOSTS = ("--backend", "hosts", "--inventory", "{dir}/inv.toml", "--out", "{dir}/out")
# the pair with a workload on both jobs: what the hosts backend runs
HOSTS_SCENARIO = SCENARIO.replace(
    "iterations = 40", 'iterations = 40\nworkload = {model = "resnet18", batch = 8}')
_HOST = ('[[hosts]]\nname = "gpu{i}"\nssh = "10.0.0.1{i}"\ndata_addr = "192.168.50.1{i}"\n'
         'data_iface = "ens1f0"\n')


def _inventory(defaults: str = "", first: str = "", second: str = "") -> str:
    """Four hosts (the pair places its jobs on h1..h4); ``defaults``, ``first`` and
    ``second`` are lines replacing or adding keys of [defaults] and the first two hosts."""
    def merged(body: str, extra: str) -> str:
        keys = {line.split("=")[0].strip() for line in extra.splitlines()}
        kept = [x for x in body.splitlines() if x.split("=")[0].strip() not in keys]
        return "\n".join([*kept, *extra.splitlines()]) + "\n"

    hosts = [_HOST.format(i=i) for i in range(1, 5)]
    hosts[0], hosts[1] = merged(hosts[0], first), merged(hosts[1], second)
    head = merged('[defaults]\nuser = "root"\npython = "/opt/mltcp/.venv/bin/python"',
                  defaults)
    return head + "\n" + "\n".join(hosts)


def _inv_row(says: str, note: str, defaults: str = "", first: str = "", second: str = "",
             extra: tuple = ()) -> Row:
    return Row(("run", "{dir}/s.toml", *HOSTS), 2, says,
               (("s.toml", HOSTS_SCENARIO), ("inv.toml", _inventory(defaults, first, second)),
                *extra), note)


def _wl_row(table: str, says: str, note: str, argv: tuple = ()) -> Row:
    text = SCENARIO.replace("iterations = 40",
                            f"iterations = 40\nworkload = {table}", 1)
    return Row(argv or ("run", "{dir}/s.toml", *FLUID), 2, says,
               (("s.toml", text),), note)


HOSTS_ROWS: list[Row] = [
    # a job's workload table, checked by the workload's own rules when the scenario is read
    _wl_row('{model = "nosuch"}', "jobs[0].workload.model", 'workload = {model = "nosuch"}'),
    _wl_row('{model = "Resnet18"}', "jobs[0].workload.model",
            'workload = {model = "Resnet18"}'),
    _wl_row('{model = "transformer", heads = 5}', "jobs[0].workload.heads",
            "a transformer whose 5 heads do not divide the preset's width 256"),
    _wl_row('{model = "transformer", preset = "tiny", heads = 3}', "jobs[0].workload.heads",
            "the tiny preset (width 64) with 3 heads"),
    _wl_row('{model = "transformer", d_model = 7}', "jobs[0].workload.d_model",
            "d_model = 7, below the workload's 8"),
    _wl_row('{model = "transformer", d_model = 20000}', "jobs[0].workload.d_model",
            "d_model = 20000, above the workload's 16384"),
    _wl_row('{model = "transformer", vocab = 1}', "jobs[0].workload.vocab",
            "vocab = 1, below the workload's 2"),
    _wl_row('{model = "transformer", seq = 1}', "jobs[0].workload.seq",
            "seq = 1, below the workload's 2"),
    _wl_row('{model = "transformer", seq = 100000}', "jobs[0].workload.seq",
            "seq = 100000, above the workload's 65536"),
    _wl_row('{model = "transformer", layers = 300}', "jobs[0].workload.layers",
            "layers = 300, above the workload's 256"),
    _wl_row('{model = "transformer", heads = 300}', "jobs[0].workload.heads",
            "heads = 300, above the workload's 256"),
    _wl_row('{model = "resnet18", image_size = 16}', "jobs[0].workload.image_size",
            "image_size = 16, below the workload's 32"),
    _wl_row('{model = "resnet18", image_size = 2000}', "jobs[0].workload.image_size",
            "image_size = 2000, above the workload's 1024"),
    _wl_row('{model = "resnet18", batch = 0}', "jobs[0].workload.batch",
            "workload batch = 0"),
    _wl_row('{model = "resnet18", batch = 70000}', "jobs[0].workload.batch",
            "workload batch = 70000, above the workload's 65536"),
    _wl_row('{model = "resnet18", batch = "8"}', "jobs[0].workload.batch",
            'workload batch = "8", a string'),
    _wl_row('{model = "resnet18", gpu_time_ms = 700000}', "jobs[0].workload.gpu_time_ms",
            "gpu_time_ms = 700000, above the workload's 600000"),
    _wl_row('{model = "resnet18", gpu_time_ms = inf}', "jobs[0].workload.gpu_time_ms",
            "gpu_time_ms = inf"),
    _wl_row('{model = "resnet18", d_model = 64}', "jobs[0].workload.d_model",
            "a transformer size on a CNN"),
    _wl_row('{model = "resnet18", preset = "base"}', "jobs[0].workload.preset",
            "a preset on a CNN"),
    _wl_row('{model = "transformer", image_size = 64}', "jobs[0].workload.image_size",
            "an image size on the transformer"),
    _wl_row('{model = "transformer", preset = "large"}', "jobs[0].workload.preset",
            'preset = "large"'),
    _wl_row('{model = "resnet18", backend = "auto"}', "jobs[0].workload.backend",
            'workload backend = "auto" (the workload\'s default, not a scenario\'s)'),
    _wl_row('{model = "transformer", d_model = 16384, layers = 256, vocab = 1000000}',
            "jobs[0].workload.d_model", "~10^12 parameters, every size in range"),
    _wl_row('{model = "transformer", preset = "base", batch = 65536}',
            "jobs[0].workload.batch", "GPT-2-base sized with batch 65536: 16 TiB of "
            "activations per rank"),
    _wl_row('{model = "vgg19", image_size = 1024, batch = 65536}',
            "jobs[0].workload.batch", "vgg19 on 1024x1024 images, batch 65536"),
    _wl_row('{model = "transformer", heads = 5}', "jobs[0].workload.heads",
            "heads = 5 through compare", ("compare", "{dir}/s.toml", *FLUID)),
    _wl_row('{model = "transformer", heads = 5}', "jobs[0].workload.heads",
            "heads = 5 through sweep", ("sweep", "{dir}/s.toml", "--out", "{dir}/out",
                                        "--param", "slope=1,2")),
    _wl_row('{model = "transformer", heads = 5}', "jobs[0].workload.heads",
            "heads = 5 on the hosts backend: refused before the inventory is read",
            ("run", "{dir}/s.toml", *HOSTS)),
    # the hosts inventory, refused when it is read, before any SSH connection
    _inv_row("hosts[0].data_addr", "data_addr 0.0.0.0", first='data_addr = "0.0.0.0"'),
    _inv_row("hosts[0].data_addr", "data_addr ::", first='data_addr = "::"'),
    _inv_row("hosts[0].data_addr", "data_addr loopback 127.0.0.1",
             first='data_addr = "127.0.0.1"'),
    _inv_row("hosts[0].data_addr", "data_addr loopback ::1", first='data_addr = "::1"'),
    _inv_row("hosts[0].data_addr", "data_addr multicast 224.0.0.1",
             first='data_addr = "224.0.0.1"'),
    _inv_row("hosts[0].data_addr", "data_addr broadcast 255.255.255.255",
             first='data_addr = "255.255.255.255"'),
    _inv_row("hosts[0].data_addr", "data_addr reserved 240.0.0.1",
             first='data_addr = "240.0.0.1"'),
    _inv_row("hosts[0].data_addr", "data_addr 0.1.2.3 ('this network', 0.0.0.0/8)",
             first='data_addr = "0.1.2.3"'),
    _inv_row("hosts[0].ssh", "ssh a 254-character name",
             first=f'ssh = "{"a" * 63}.{"b" * 63}.{"c" * 63}.{"d" * 62}"'),
    _inv_row("hosts[0].data_addr", "data_addr link-local IPv6 without a zone",
             first='data_addr = "fe80::1"'),
    _inv_row("hosts[0].data_addr", "data_addr with a zone id",
             first='data_addr = "fe80::1%ens1f0"'),
    _inv_row("hosts[1].data_addr", "data_addr: host 1's as IPv4-mapped IPv6",
             second='data_addr = "::ffff:192.168.50.11"'),
    _inv_row("hosts[0].ssh", "ssh 10.0.0.256", first='ssh = "10.0.0.256"'),
    _inv_row("hosts[0].ssh", "ssh 999", first='ssh = "999"'),
    _inv_row("hosts[0].ssh", "ssh 0.0.0.0", first='ssh = "0.0.0.0"'),
    _inv_row("hosts[0].ssh", "ssh gpu1.123 (an all-digit last label)",
             first='ssh = "gpu1.123"'),
    _inv_row("hosts[0].data_iface", "data_iface .", first='data_iface = "."'),
    _inv_row("hosts[0].data_iface", "data_iface ..", first='data_iface = ".."'),
    _inv_row("hosts[0].data_iface", "data_iface eth0:1 (an address label)",
             first='data_iface = "eth0:1"'),
    _inv_row("hosts[0].data_iface", "data_iface with a slash", first='data_iface = "a/b"'),
    _inv_row("defaults.python", "python with a space and an option",
             defaults='python = "/opt/my venv/python -u"'),
    _inv_row("defaults.key", "key: no such file next to the inventory",
             defaults='key = "nosuch_key"'),
    _inv_row("defaults.key", "key under ~ that does not exist", defaults='key = "~/nosuch"'),
    _inv_row("defaults.key", "key is a directory", defaults='key = "."'),
    _inv_row("defaults.key", "key /dev/null", defaults='key = "/dev/null"'),
    _inv_row("hosts[1].key", "a host's own key missing", second='key = "gpu2_key"'),
    _inv_row("defaults.known_hosts", "known_hosts: no such file",
             defaults='known_hosts = "nosuch_known_hosts"'),
    _inv_row("defaults.known_hosts", "known_hosts is a directory",
             defaults='known_hosts = "."'),
    _inv_row("defaults.known_hosts", "known_hosts /dev/null (strict checking refuses every "
             "host)", defaults='known_hosts = "/dev/null"'),
    _inv_row("defaults.known_hosts", "known_hosts without a key",
             defaults='known_hosts = "known"', extra=(("known", "# none yet\n"),)),
    Row(("run", "{dir}/s.toml", "--backend", "hosts", "--inventory", "{dir}/conf/inv.toml",
         "--out", "{dir}/out"), 2, "defaults.key",
        (("s.toml", HOSTS_SCENARIO), ("id_lab", "key\n"),
         ("conf/inv.toml", _inventory('key = "id_lab"'))),
        "key id_lab in the working directory, not beside conf/inv.toml"),
    Row(("run", "{dir}/s.toml", *HOSTS), 2, "hosts[0].data_addr",
        (("s.toml", HOSTS_SCENARIO),
         ("inv.toml", b"\xef\xbb\xbf" + _inventory(first='data_addr = "0.0.0.0"').encode())),
        "an inventory with a UTF-8 BOM (read, not a syntax error) and data_addr 0.0.0.0"),
]

ROWS += HOSTS_ROWS


@dataclass(frozen=True)
class Answer:
    code: int
    stdout: str
    stderr: str


def _as_nobody() -> list[str]:
    """The prefix that runs a command as nobody (root only)."""
    return [shutil.which("setpriv") or "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
            "--clear-groups", "--inh-caps=-all"]


def _nobody_runs(python: str, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_as_nobody(), python, "-c", "import mltcp, prometheus_client"],
                          capture_output=True, text=True, cwd="/",
                          env={**os.environ, "PYTHONPATH": path})


@functools.cache
def _nobody_python() -> tuple[str, str] | str:
    """As root: (interpreter, PYTHONPATH) with which nobody runs this checkout's CLI, or
    why there is none.  The venv's interpreter first; where it lives under a directory
    nobody may not enter (a pyenv build in /root), the system's interpreter of the same
    version with the venv's packages on the path."""
    if not shutil.which("setpriv"):
        return "as root, needs setpriv (util-linux) to run the row as nobody"
    probe = _nobody_runs(sys.executable, str(REPO))
    if probe.returncode == 0:
        return sys.executable, str(REPO)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    path = os.pathsep.join([str(REPO), *site.getsitepackages()])
    for cand in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if os.access(cand, os.X_OK) and _nobody_runs(cand, path).returncode == 0:
            return cand, path
    return (f"as root, nobody must be able to run {sys.executable} (or /usr/bin/{version}) "
            f"and read {REPO} to run the row unprivileged ({probe.stderr.strip()[-120:]}); "
            "run this file as an unprivileged user")


def why_not_runnable(row: Row) -> str | None:
    """Why this row cannot run here (as the user it needs), or None."""
    root = os.geteuid() == 0
    if row.root and not root:
        return "needs root: the check behind it is reached only as root"
    if not row.root and root:
        found = _nobody_python()
        return found if isinstance(found, str) else None
    return None


def run(row: Row) -> Answer:
    """Run the row's command in a directory of its own; the answer, with that directory
    shown as DIR."""
    base = Path(tempfile.mkdtemp(prefix="mltcp-bad-input-"))
    try:
        os.chmod(base, 0o777)            # nobody writes its state and outputs here
        for name, content in row.files:
            path = base / name.replace("{dir}/", "")
            path.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(path.parent, 0o777)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        argv = [a.replace("{dir}", str(base)) for a in row.argv]
        python, path = sys.executable, str(REPO)
        prefix: list[str] = []
        if os.geteuid() == 0 and not row.root:
            prefix = _as_nobody()
            python, path = _nobody_python()   # type: ignore[misc]
        env = {**os.environ, "PYTHONPATH": path, "MLTCP_STATE_DIR": str(base / "state"),
               "MLTCP_PIN_ROOT": str(base / "no-pins"), "HOME": str(base),
               "XDG_CACHE_HOME": str(base / "cache")}
        proc = subprocess.run([*prefix, python, "-m", "mltcp.cli", *argv],
                              capture_output=True, text=True, env=env, cwd=base,
                              timeout=TIMEOUT_S)
        shown = proc.stderr.replace(str(base), "DIR")
        return Answer(proc.returncode, proc.stdout, shown)
    finally:
        shutil.rmtree(base, ignore_errors=True)


NOT_RECORDED = "(not recorded: run scripts/bad_input_table.py as root)"


def doc_line(row: Row, answer: Answer | None) -> str:
    """The row in docs/bad-input.md: input, exit code, the one line it answered."""
    text = NOT_RECORDED if answer is None else \
        (answer.stderr.strip() or "(nothing on stderr)").replace("|", "\\|")
    code = row.code if answer is None else answer.code
    return f"| {row.cell} | {code} | {text} |"


def doc_rows() -> dict[str, tuple[int, str]]:
    """``docs/bad-input.md`` as {input cell: (exit code, answer)}."""
    out = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\| (`.+?) \| (\d+) \| (.*) \|$", line)
        if m:
            out[m.group(1)] = (int(m.group(2)), m.group(3))
    return out


@pytest.mark.parametrize("row", ROWS, ids=[r.cell.replace("`", "") for r in ROWS])
def test_bad_input_is_one_line_naming_it(row: Row) -> None:
    why = why_not_runnable(row)
    if why:
        pytest.skip(why)
    answer = run(row)
    assert "Traceback" not in answer.stderr, answer.stderr
    lines = answer.stderr.splitlines()
    assert len(lines) == 1, f"not one line: {answer.stderr!r}"
    assert lines[0].startswith("mltcp: error: "), lines[0]
    assert row.says in lines[0], f"{row.says!r} not in {lines[0]!r}"
    assert answer.code == row.code, (answer.code, lines[0])
    assert answer.stdout == "", answer.stdout


def test_the_table_has_the_rows_the_issue_asks_for() -> None:
    commands = {r.command for r in ROWS}
    for wanted in ("mltcp status --watch -1", "mltcp agent --metrics-port 70000",
                   "mltcp sweep compatible-pair --out DIR/out --param load=inf",
                   "mltcp dcqcn run --budget 1MB --duration-s nan",
                   "mltcp job attach x --cgroup / --budget 1MB",
                   "mltcp job attach x --dst 10.0.0.0:29500 --budget 1MB"):
        assert wanted in commands, wanted
    assert len({r.cell for r in ROWS}) == len(ROWS), "two rows with one input cell"


def test_the_doc_has_every_row_with_its_code_and_answer() -> None:
    """docs/bad-input.md is written by scripts/bad_input_table.py from ROWS: every row is
    there, with the code the row expects and an answer naming what the row says."""
    documented = doc_rows()
    stale = "; run scripts/bad_input_table.py"
    for row in ROWS:
        assert row.cell in documented, f"{row.cell} is not in {DOC.name}{stale}"
        code, answer = documented[row.cell]
        assert code == row.code, f"{row.cell}: exit {code} in {DOC.name}{stale}"
        if answer != NOT_RECORDED:
            assert answer.startswith("mltcp: error: ") and row.says in answer, \
                f"{row.cell}: {answer!r}{stale}"
    assert len(documented) == len(ROWS), f"{DOC.name} has rows the table has not{stale}"

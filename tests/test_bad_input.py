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

import base64
import functools
import io
import json
import os
import pickle
import re
import shutil
import site
import subprocess
import sys
import tempfile
import zipfile
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
    Row((*SWEEP, "--param", "slope=1", "--parallel", "0"), 2, "--parallel"),
    Row((*SWEEP, "--param", "slope=1", "--workers", "2"), 2, "--workers"),
    Row(("cluster", "run", "small", "--out", "{dir}/out", "--dask", "tcp://host"), 2, "--dask"),
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

# Issue 25: the cluster simulator's configs and traces, the RL scheduler's policies and
# rl-train's flags (cluster run refuses before --out is made, rl-train before training).


RUN = ("cluster", "run", "{dir}/c.toml", "--out", "{dir}/out")
SHIPPED_POLICY = (REPO / "mltcp/lab/cluster/papers/deepshare_rl/policies/"
                  "deepshare-normal-w0.4.zip").read_bytes()
RL_TRAIN = ("cluster", "rl-train", "--out", "{dir}/o", "--timesteps", "64", "--jobs", "2",
            "--n-steps", "16", "--duration-s", "10")
CSV_HEADER = "name,arrival_s,model,compute_s,gradient_bytes,gpus,iterations"
CSV_GOOD = f"{CSV_HEADER}\nj0,0,resnet50,,,4,20\nj1,1,,0.2,100MB,8,20\n"
CLUSTER_8 = "[cluster]\nleaves = 1\nservers_per_leaf = 2\nspines = 1\ngpus_per_server = 4\n"
DEEPSHARE_4 = '[jobs]\nsetup = { name = "deepshare-normal", first = 4 }\n'


def _cluster_toml(jobs: str = '[jobs]\ntrace = "jobs.csv"\n',
                  schedulers: str = '["fifo/first_fit"]', extra: str = "",
                  cluster: str = CLUSTER_8) -> str:
    return (f'name = "t"\nschedulers = {schedulers}\nnetworks = ["fair", "mltcp"]\n{extra}\n'
            f"{cluster}\n{jobs}")


def _csv_row(csv: str | bytes, says: str, note: str, toml: str | None = None) -> Row:
    """``cluster run`` of the 8-GPU cluster with the trace ``csv``."""
    return Row(RUN, 2, says, (("c.toml", toml or _cluster_toml()), ("jobs.csv", csv)),
               note)


def _toml_row(toml: str | bytes, says: str, note: str, files: tuple = ()) -> Row:
    return Row(RUN, 2, says, (("c.toml", toml), ("jobs.csv", CSV_GOOD), *files), note)


def _poisson(rate: str, n: int = 4) -> str:
    return (f"[jobs.poisson]\nn = {n}\n{rate}\nmodels = {{ \"resnet50\" = 1 }}\ngpus = [4]\n"
            "iterations = [10, 20]\n")


def _serialised(pickled: bytes) -> dict:
    return {":type:": "<class 'object'>", ":serialized:": base64.b64encode(pickled).decode()}


# pickles by reference (pickle's GLOBAL opcode): what SB3 stores for a policy class
PPO_CLASS = b"cstable_baselines3.common.policies\nActorCriticPolicy\n."
MASKABLE_CLASS = b"csb3_contrib.common.maskable.policies\nMaskableActorCriticPolicy\n."


def _sb3_zip(members: dict[str, bytes | str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buf.getvalue()


def _policy(policy_class: bytes, spaces: dict | None = None, weights: bytes = b"x") -> bytes:
    """A zip as stable-baselines3 saves a model, with ``data`` holding ``policy_class``
    (and the pickled ``spaces``) and ``weights`` as policy.pth."""
    data = {"policy_class": _serialised(policy_class),
            **{k: _serialised(v) for k, v in (spaces or {}).items()}}
    return _sb3_zip({"data": json.dumps(data), "policy.pth": weights})


def _spaces(obs_shape: tuple, actions: int) -> dict:
    """Pickled gymnasium spaces (gymnasium comes with mltcp[rl]; {} without it, which
    the loader refuses as unreadable spaces instead)."""
    try:
        import gymnasium
        import numpy
    except ImportError:
        return {}
    return {"observation_space": pickle.dumps(gymnasium.spaces.Box(
        0.0, 2.0, obs_shape, numpy.float32)),
        "action_space": pickle.dumps(gymnasium.spaces.Discrete(actions))}


def _policy_row(policy: str | bytes | None, says: str, note: str, spec: str = "rl-base@p.zip",
                files: tuple = ()) -> Row:
    """``cluster run`` of the RL scheduler on deepshare-rl's cluster, with ``policy`` as
    p.zip beside the config."""
    toml = _cluster_toml(DEEPSHARE_4, f'["{spec}"]', cluster="")
    own = (("p.zip", policy),) if policy is not None else ()
    return Row(RUN, 2, says, (("c.toml", toml), *own, *files), note)


CLUSTER_ROWS: list[Row] = [
    # the CSV trace: encodings and the form of the file
    _csv_row(f"{CSV_HEADER}\nj\xe9,0,resnet50,,,4,20\n".encode("latin-1"), "jobs.csv:2",
             "a latin-1 byte in row 1"),
    _csv_row(CSV_GOOD.encode("utf-16"), "not UTF-8", "a UTF-16 file"),
    _csv_row(f"\ufeff{CSV_HEADER}\nj0,0,resnet50,,,9,20\n",
             "jobs.csv:2 (row 1) column gpus", "a UTF-8 byte-order mark (read), 9 GPUs"),
    _csv_row(f"{CSV_HEADER}\n", "has a header and no rows", "a header and no rows"),
    _csv_row(f"# jobs\n{CSV_HEADER}\n\n# none yet\n", "has a header and no rows",
             "a header, comments and no rows"),
    _csv_row(CSV_GOOD.replace(",", ";"), "separated by semicolons", "semicolons"),
    _csv_row(CSV_GOOD.replace(",", "\t"), "separated by tabs", "tabs"),
    _csv_row(CSV_GOOD.replace(",", "|"), "not commas", "'|' between the columns"),
    _csv_row(f'{CSV_HEADER}\n"j\n0",0,resnet50,,,4,20\n', "quoted cell",
             "a quoted cell spanning two lines"),
    _csv_row(f'{CSV_HEADER}\n"j0,0,resnet50,,,4,20\n', "quoted cell",
             "a quote never closed"),
    _csv_row(f"{CSV_HEADER}\nj\x000,0,resnet50,,,4,20\n", "NUL byte", "a NUL byte"),
    _csv_row(f'{CSV_HEADER}\n"j"0,0,resnet50,,,4,20\n', "jobs.csv:2 (row 1)",
             "text after a closing quote"),
    # the CSV trace: values
    _csv_row(f"{CSV_HEADER}\nj0,0,resnet50,,,9,20\n", "jobs.csv:2 (row 1) column gpus",
             "9 GPUs on an 8-GPU cluster"),
    _csv_row(f"{CSV_HEADER}\nj0,0,,0.2,1MB,4,20\nj1,0,,0.2,1MB,64,20\n",
             "jobs.csv:3 (row 2) column gpus", "64 GPUs on an 8-GPU cluster, row 2"),
    _csv_row(f"{CSV_HEADER}\nj0,0,,0,0,4,20\n", "column compute_s",
             "compute_s 0 and gradient_bytes 0"),
    _csv_row(f"{CSV_HEADER}\nj0,0,,0.0,0e0,4,20\n", "no time",
             "compute_s 0.0 and gradient_bytes 0e0"),
    _csv_row(f"{CSV_HEADER}\nj0,0,,0.2,100TB,8,20\n", "column gradient_bytes",
             "100TB per iteration (size form past 1e13)"),
    _csv_row(f"{CSV_HEADER}\nj0,0,,0.2,10001GB,8,20\n", "column gradient_bytes",
             "10001GB per iteration"),
    _csv_row(f"{CSV_HEADER}\nj0,0,,0.2,10TiB,8,20\n", "column gradient_bytes",
             "10TiB per iteration"),
    _csv_row(f"{CSV_HEADER}\n" + "".join(f"j{i},{i},resnet50,,,4,10\n" for i in range(500)),
             "jobs.trace x seeds", "500 rows x 10000 seeds: counted before parsing",
             _cluster_toml(extra='seeds = "0-9999"')),
    # the trace's path
    _toml_row(_cluster_toml('[jobs]\ntrace = "."\n'), "is a directory",
              'jobs.trace = "." (the config\'s directory)'),
    _toml_row(_cluster_toml('[jobs]\ntrace = "sub"\n'), "is a directory",
              "jobs.trace a directory", (("sub/x", ""),)),
    _toml_row(_cluster_toml('[jobs]\ntrace = ""\n'), "jobs.trace: is empty",
              'jobs.trace = ""'),
    _toml_row(_cluster_toml('[jobs]\ntrace = "  "\n'), "jobs.trace: is empty",
              'jobs.trace = "  "'),
    _toml_row(_cluster_toml('[jobs]\ntrace = "/dev/null"\n'), "character device",
              'jobs.trace = "/dev/null"'),
    _toml_row(_cluster_toml('[jobs]\ntrace = "jobs.csv/x"\n'), "a part of the path is a file",
              'jobs.trace = "jobs.csv/x"'),
    # the config file
    _toml_row(("\ufeff" + _cluster_toml()).replace('name = "t"', 'name = "T t"'),
              "name: 'T t'", "a UTF-8 byte-order mark (read), a bad name"),
    _toml_row(b"\xef\xbb\xbf" + _cluster_toml(schedulers='["fifo/nowhere"]').encode(),
              "schedulers[0]", "a byte-order mark (read), an unknown scheduler"),
    # what the simulator would refuse later, named by the config's field
    _toml_row(_cluster_toml(DEEPSHARE_4, '["deepshare-las"]'), "jobs.setup",
              "deepshare-rl's setup (jobs of up to 32 GPUs) under an 8-GPU [cluster]"),
    _toml_row(_cluster_toml('[jobs]\nsetup = { name = "vclos-cluster512-fifo", first = 8 }\n'),
              "jobs.setup", "vClos's setup under an 8-GPU [cluster]"),
    _toml_row(_cluster_toml(_poisson("jobs_per_hour = 1e-9")), "jobs.poisson.jobs_per_hour",
              "jobs_per_hour = 1e-9: 4 jobs spread past 1e9 s"),
    _toml_row(_cluster_toml(_poisson("jobs_per_hour = 1e-5", 10)),
              "jobs.poisson.jobs_per_hour", "jobs_per_hour = 1e-5 for 10 jobs"),
    _toml_row(_cluster_toml(_poisson("load = 1e-9")), "jobs.poisson.load",
              "load = 1e-9: jobs spread past 1e9 s"),
    # one scheduler, two spellings
    _toml_row(_cluster_toml(schedulers='["fifo/first_fit+preempt+preempt"]'),
              "flag +preempt is given twice", "+preempt twice"),
    _toml_row(_cluster_toml(schedulers='["fifo/first_fit+backfill+backfill"]'),
              "flag +backfill is given twice", "+backfill twice"),
    _toml_row(_cluster_toml(schedulers='["fifo/first_fit+backfill+preempt", '
                                       '"fifo/first_fit+preempt+backfill"]'),
              "schedulers[1]", "one scheduler with its flags in two orders"),
    _toml_row(_cluster_toml(schedulers='["las/consolidated+preempt", '
                                       '"srtf/first_fit", "las/consolidated+preempt+preempt"]'),
              "schedulers[2]", "a flag twice in the third scheduler"),
    _policy_row(None, "schedulers[1]", "rl-base and rl-base@ the shipped policy's name",
                'rl-base", "rl-base@deepshare-normal-w0.4'),
    _policy_row(SHIPPED_POLICY, "schedulers[1]", "one policy file by two paths",
                'rl-hybrid@p.zip", "rl-hybrid@./sub/../p.zip', (("sub/x", ""),)),
    _policy_row(None, "schedulers[1]", "rl-hybrid and rl-hybrid@ the shipped policy's name",
                'rl-hybrid", "rl-hybrid@deepshare-normal-w0.4'),
    # the RL policy file
    _policy_row("", "is empty", "an empty policy file"),
    _policy_row("not a policy\n", "not a zip file", "a text file as the policy"),
    _policy_row(bytes(range(256)) * 4, "not a zip file", "random bytes as the policy"),
    _policy_row(_sb3_zip({}), "no 'data'", "an empty zip as the policy"),
    _policy_row(_sb3_zip({"jobs.csv": CSV_GOOD}), "no 'data'", "a zip of a CSV"),
    _policy_row(_sb3_zip({"data": "{}"}), "no 'policy.pth'", "a zip without policy.pth"),
    _policy_row(_sb3_zip({"data": "not json", "policy.pth": "x"}), "unreadable 'data'",
                "a zip whose data is not JSON"),
    _policy_row(_policy(PPO_CLASS)[:200], "not a zip file", "a policy cut short"),
    _policy_row(_policy(PPO_CLASS), "class ActorCriticPolicy",
                "a PPO (not MaskablePPO) policy"),
    _policy_row(_policy(MASKABLE_CLASS, _spaces((10,), 10)), "another environment",
                "a MaskablePPO policy of another environment (10 actions)"),
    _policy_row(_policy(MASKABLE_CLASS, _spaces((4, 24), 10)), "another environment",
                "a MaskablePPO policy with the observations but 10 actions"),
    _policy_row(_policy(MASKABLE_CLASS), "spaces cannot be read",
                "a MaskablePPO policy without its spaces"),
    _policy_row(_policy(MASKABLE_CLASS, _spaces((4, 24), 29)),
                "cannot be loaded as a MaskablePPO policy",
                "the right class and spaces, weights that are not torch's"),
    _policy_row(None, "is a directory, not a policy file", "a directory as the policy",
                files=(("p.zip/x", ""),)),
    _policy_row(None, "is a character device", "a device as the policy",
                "rl-base@/dev/zero"),
    _policy_row(None, "no policy after '@'", "rl-base@ (no path)", "rl-base@"),
    _policy_row(None, "no policy after '@'", "rl-hybrid@ (no path)", "rl-hybrid@"),
    _policy_row(None, "no such file", "a policy that does not exist", "rl-base@nosuch.zip"),
    _policy_row(None, "a part of the path is a file", "a policy under a file",
                "rl-base@c.toml/p.zip"),
    _policy_row("junk", "deepshare-normal-w0.4 is not a zip file",
                "./NAME: the file beside the config, not the shipped policy",
                "rl-base@./deepshare-normal-w0.4", (("deepshare-normal-w0.4", "junk"),)),
    Row(("cluster", "run", "sub/c.toml", "--out", "{dir}/out"), 2,
        "sub/p.zip is not a zip file",
        (("sub/c.toml", _cluster_toml(DEEPSHARE_4, '["rl-base@p.zip"]', cluster="")),
         ("sub/p.zip", "junk"), ("p.zip", _policy(PPO_CLASS))),
        "p.zip beside the config is taken, not the one in the working directory"),
    # output paths: --force never deletes a user's directory
    Row((*RUN, "--force"), 2, "report.json is a directory",
        (("c.toml", _cluster_toml()), ("jobs.csv", CSV_GOOD), ("out/report.json/mine", "x"),
         ("out/notes.txt", "mine")),
        "--force over a directory named report.json"),
    Row((*RUN, "--force"), 2, "summary.md is a directory",
        (("c.toml", _cluster_toml()), ("jobs.csv", CSV_GOOD), ("out/summary.md/mine", "x"),
         ("out/notes.txt", "mine")),
        "--force over a directory named summary.md"),
    Row((*RUN, "--force"), 2, "jct_cdf.png is a directory",
        (("c.toml", _cluster_toml()), ("jobs.csv", CSV_GOOD), ("out/jct_cdf.png/mine", "x"),
         ("out/notes.txt", "mine")),
        "--force over a directory named jct_cdf.png"),
    Row((*RUN, "--force"), 2, "runset.json is a directory",
        (("c.toml", _cluster_toml()), ("jobs.csv", CSV_GOOD), ("out/runset.json/mine", "x"),
         ("out/notes.txt", "mine")),
        "--force over a directory named runset.json"),
    Row(RUN, 2, "report.json is a directory",
        (("c.toml", _cluster_toml()), ("jobs.csv", CSV_GOOD), ("out/report.json/mine", "x"),
         ("out/notes.txt", "mine")),
        "a directory named report.json in --out"),
    Row((*RUN, "--force"), 2, "traces is a file",
        (("c.toml", _cluster_toml()), ("jobs.csv", CSV_GOOD), ("out/traces", "mine")),
        "--force over a file named traces"),
    Row(("cluster", "run", "{dir}/c.toml", "--out", ""), 2, "--out: is empty",
        (("c.toml", _cluster_toml()), ("jobs.csv", CSV_GOOD)), "--out ''"),
    # rl-train: --name is a file name stem
    Row((*RL_TRAIN, "--name", ""), 2, "--name: is empty"),
    Row((*RL_TRAIN, "--name", " "), 2, "--name: is empty"),
    Row((*RL_TRAIN, "--name", "."), 2, "--name"),
    Row((*RL_TRAIN, "--name", ".."), 2, "--name"),
    Row((*RL_TRAIN, "--name", "../../x"), 2, "--name"),
    Row((*RL_TRAIN, "--name", "a/b"), 2, "--name"),
    Row((*RL_TRAIN, "--name", "/tmp/x"), 2, "--name"),
    Row((*RL_TRAIN, "--name", "p.zip"), 2, "--name"),
    Row((*RL_TRAIN, "--name", "P.ZIP"), 2, "--name"),
    Row((*RL_TRAIN, "--name", "x" * 300), 2, "--name"),
    Row((*RL_TRAIN, "--name", "x" * 101), 2, "--name"),
    Row((*RL_TRAIN, "--name", ".hidden"), 2, "--name"),
    Row((*RL_TRAIN, "--name", "a b"), 2, "--name"),
    Row((*RL_TRAIN, "--name=-x"), 2, "--name"),
    Row((*RL_TRAIN, "--name", "a\tb"), 2, "--name"),
    # rl-train: options that need another, and a degenerate rollout
    Row((*RL_TRAIN, "--select-every", "5"), 2, "--select-every"),
    Row((*RL_TRAIN, "--select-by", "rl-base"), 2, "--select-by"),
    Row((*RL_TRAIN, "--warm-start-epochs", "3"), 2, "--warm-start-epochs"),
    Row((*RL_TRAIN, "--n-steps", "1000000"), 2, "--n-steps"),
    Row(("cluster", "rl-train", "--out", "{dir}/o", "--timesteps", "1000"), 2,
        "--n-steps"),
    # rl-train: an output path held by a directory, found before training
    Row((*RL_TRAIN[:4], "--timesteps", "64", "--n-steps", "16"), 2,
        "policy.zip is a directory", (("o/policy.zip/x", ""), ("o/notes.txt", "")),
        "a directory o/policy.zip"),
    Row((*RL_TRAIN[:4], "--timesteps", "64", "--n-steps", "32"), 2,
        "policy.json is a directory", (("o/policy.json/x", ""), ("o/notes.txt", "")),
        "a directory o/policy.json"),
    Row((*RL_TRAIN[:4], "--timesteps", "64", "--n-steps", "64"), 2,
        "policy-curves.png is a directory", (("o/policy-curves.png/x", ""), ("o/notes.txt", "")),
        "a directory o/policy-curves.png"),
    Row((*RL_TRAIN[:4], "--timesteps", "128", "--n-steps", "64"), 2,
        "policy-curves.pdf is a directory", (("o/policy-curves.pdf/x", ""), ("o/notes.txt", "")),
        "a directory o/policy-curves.pdf"),
    Row((*RL_TRAIN, "--name", "p"), 2, "p.zip is a directory",
        (("o/p.zip/x", ""), ("o/notes.txt", "")), "--name p and a directory o/p.zip"),
]

ROWS += HOSTS_ROWS + CLUSTER_ROWS


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
    # the second round (issue 25): at least 150 inputs of the parts added since the first
    assert len(HOSTS_ROWS) + len(CLUSTER_ROWS) >= 150


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


def test_the_doc_names_the_bad_input_tests_that_are_not_rows() -> None:
    """The inputs no command line reaches (the hook's environment variables) and the
    validators tested directly are in other files: docs/bad-input.md's "Tested elsewhere"
    names each of them with its number of cases, so the table is not taken for all."""
    section = DOC.read_text().partition("\n## Tested elsewhere\n")[2]
    others = sorted(p.name for p in (REPO / "tests").glob("test_*bad_input*.py")
                    if p.name != Path(__file__).name)
    assert "test_hook_env_bad_input.py" in others
    for name in others:
        assert re.search(rf"^\* `tests/{name}` \(\d+ cases\): ", section, re.MULTILINE), \
            f"tests/{name} is not in {DOC.name}'s Tested elsewhere; add it to ELSEWHERE in " \
            "scripts/bad_input_table.py and run it"

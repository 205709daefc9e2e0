"""The JSON Schemas of the TOML formats (``mltcp/schemas/``, issue 26): shipped, what
``scripts/schemas.py`` generates, and in agreement with the parsers, which stay the only
judges of a file (the schemas are editor tooling).

Agreement is checked both ways, from the code rather than from lists retyped here:

* every example the project ships or documents is valid by its schema and its parser;
* every table: an unknown key injected into it is refused by both, and the keys the
  parser then lists (``validate.known_keys``'s "use one of: ...") are the schema's;
* every bound of every schema (``minimum``, ``maximum``, ``exclusiveMinimum``): at it the
  parser takes the value (or refuses it for another reason than its range), just past it
  the parser refuses it naming the field, and so does the schema;
* every value of a file replaced by one of each other type: what the schema refuses the
  parser refuses, and what the parser refuses for its type, range or choice the schema
  refuses (``PARSER_GAPS``: where a parser takes what it should not);
* the project's bad inputs (tests/test_bad_input.py's rows with a TOML file, the
  inventory's and the workload table's refusals): whatever the schema refuses the
  parser refuses, and what the parser refuses for a structural reason (an unknown key, a
  type, a range, a choice, a missing key) the schema refuses too.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import re
import tomllib
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mltcp.core.errors import SpecError
from scripts import schemas as generator

REPO = Path(__file__).resolve().parents[1]
NAMES = ("scenario", "cluster", "inventory", "jobs")
BOGUS = "zz_not_a_key"
# A parser's refusal of a value for its range or type: at a schema's bound the parser
# must not give one for that field.
RANGE = re.compile(r"must be (between|[<>]|an integer|a number|a finite)|out of range")


def _schema(name: str) -> dict:
    return json.loads(resources.files("mltcp").joinpath("schemas", f"{name}.schema.json")
                      .read_text())


VALIDATORS = {name: Draft202012Validator(_schema(name)) for name in NAMES}


# --------------------------------------------------------------------------- the parsers


def _parse_scenario(data: dict, where: Path) -> object:
    from mltcp.lab.scenario.spec import parse_scenario
    return parse_scenario(data)


def _parse_cluster(data: dict, where: Path) -> object:
    from mltcp.lab.cluster.experiments.config import parse_config
    return parse_config(data, where)


def _parse_inventory(data: dict, where: Path) -> object:
    from mltcp.lab.scenario.hosts.inventory import parse_inventory
    return parse_inventory(data, "inv.toml", where)


def _parse_jobs(data: dict, where: Path) -> object:
    from mltcp.host import jobfile
    return jobfile.parse(data, where / "jobs.toml")


PARSERS: dict[str, Callable[[dict, Path], object]] = {
    "scenario": _parse_scenario, "cluster": _parse_cluster, "inventory": _parse_inventory,
    "jobs": _parse_jobs}


def parser_says(name: str, data: dict, where: Path) -> SpecError | None:
    """None where the format's parser takes ``data``, else its refusal."""
    try:
        PARSERS[name](copy.deepcopy(data), where)
    except SpecError as err:
        return err
    return None


def schema_takes(name: str, data: object) -> bool:
    return VALIDATORS[name].is_valid(data)


# --------------------------------------------------------------------------- shipped = generated


@pytest.mark.parametrize("name", NAMES)
def test_the_shipped_schema_is_the_generated_one(name: str) -> None:
    shipped = resources.files("mltcp").joinpath("schemas", f"{name}.schema.json").read_text()
    assert shipped == generator.render(name), f"run scripts/schemas.py ({name} is stale)"


def test_the_package_ships_the_schemas_and_nothing_else_there() -> None:
    folder = resources.files("mltcp").joinpath("schemas")
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"{n}.schema.json" for n in NAMES)
    assert tuple(generator.SCHEMAS) == NAMES
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "schemas/*.schema.json" in pyproject["tool"]["setuptools"]["package-data"]["mltcp"]
    assert any(r.startswith("jsonschema") for r in
               pyproject["project"]["optional-dependencies"]["test"])


@pytest.mark.parametrize("name", NAMES)
def test_each_schema_is_a_draft_2020_12_schema_with_its_identity(name: str) -> None:
    schema = _schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"urn:mltcp:schema:{name}"
    assert schema["title"] and len(schema["description"]) > 40
    assert schema["additionalProperties"] is False


# --------------------------------------------------------------------------- examples


def _literal_block(obj: object) -> str:
    """The ``::`` literal block of a docstring (its TOML example)."""
    text = inspect.getdoc(obj) or ""
    block = text.split("::\n\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    return "\n".join(lines)


def _markdown_toml(path: Path, containing: str) -> str:
    blocks = re.findall(r"```toml\n(.*?)```", path.read_text(), re.S)
    return next(b for b in blocks if containing in b)


def _jobs_example_uncommented() -> str:
    """mltcp/host/systemd/jobs.toml.example with its commented-out jobs written in."""
    text = (REPO / "mltcp/host/systemd/jobs.toml.example").read_text()
    head, _, jobs = text.partition("# [[job]]")
    return head + "\n".join(line.removeprefix("# ").removeprefix("#")
                            for line in ("# [[job]]" + jobs).splitlines())


def _examples() -> Iterator[tuple[str, str, str]]:
    """(format, label, TOML text) of every example the project ships or documents."""
    from mltcp.host import jobfile
    from mltcp.lab.scenario.hosts import inventory

    for name, folder in (("scenario", "mltcp/lab/scenario/examples"),
                         ("cluster", "mltcp/lab/cluster/experiments/examples")):
        for path in sorted((REPO / folder).glob("*.toml")):
            yield name, str(path.relative_to(REPO)), path.read_text()
    example = REPO / "mltcp/host/systemd/jobs.toml.example"
    yield "jobs", "jobs.toml.example", example.read_text()
    yield "jobs", "jobs.toml.example, its jobs uncommented", _jobs_example_uncommented()
    yield "jobs", "mltcp.host.jobfile's docstring", _literal_block(jobfile)
    yield "inventory", "mltcp.lab.scenario.hosts.inventory's docstring", \
        _literal_block(inventory)
    yield "inventory", "docs/testbed.md", _markdown_toml(REPO / "docs/testbed.md", "[[hosts]]")


EXAMPLES = list(_examples())


@pytest.fixture
def ssh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose ~/.ssh holds the files the documented inventories name."""
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    for key in ("mltcp_ed25519", "id_ed25519"):
        (ssh / key).write_text("key\n")
        (ssh / key).chmod(0o600)
    (ssh / "known_hosts").write_text("10.0.0.11 ssh-ed25519 AAAA\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("name", "label", "text"), EXAMPLES,
                         ids=[f"{n}:{label}" for n, label, _ in EXAMPLES])
def test_every_example_is_valid_by_its_schema_and_its_parser(
        name: str, label: str, text: str, ssh_home: Path) -> None:
    data = tomllib.loads(text)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in VALIDATORS[name].iter_errors(data)]
    assert errors == [], label
    assert parser_says(name, data, ssh_home) is None, label


# --------------------------------------------------------------------------- complete files
# One file of each format (two where keys exclude each other) using every optional key,
# integers where a size may be a string: the bases the key and bound probes start from.

FULL_SCENARIO = """
name = "full"
description = "every key"
seeds = [0, 1]
record_links = ["bottleneck"]

[topology]
kind = "dumbbell"
bottleneck_mbit = 1000
host_link_mbit = 10000
queue_packets = 400
hosts = 4
ecn_threshold_bytes = 100000
gso_max_segs = 4
rto_min_ms = 5
mtu_bytes = 1500

[[jobs]]
name = "a"
compute_ms = 120
bytes_per_iteration = 10000000
workers = 2
placement = ["h1", "h3"]
connections = 2
start_offset_ms = 10
iterations = 40
collective = "ring_allreduce"
compute_jitter_ms = 5
[jobs.workload]
model = "transformer"
preset = "tiny"
d_model = 64
layers = 2
heads = 2
seq = 32
vocab = 1000
batch = 8
backend = "gloo"
gpu_time_ms = 10
signal = true

[[jobs]]
name = "b"
bytes_per_iteration = "10MB"
workers = 2
iterations = 40
phases = [{compute_ms = 40, share = 0.5}, {compute_ms = 60, share = 0.5}]
workload = {model = "resnet18", image_size = 64}

[[schemes]]
name = "mltcp"
cc = "dctcp"
mltcp = true
slope = 2.0
intercept = 1.0
cap = 2.5
dcqcn_mode = "timer"

[[schemes]]
name = "cassini"
cc = "cubic"
mltcp = false
schedule = "cassini"
"""
LEAF_SPINE = """
name = "ls"
[topology]
kind = "leaf_spine"
host_link_mbit = 1000
queue_packets = 100
leaves = 2
spines = 1
hosts_per_leaf = 2
oversubscription = 2.0
[[jobs]]
name = "a"
compute_ms = 100
bytes_per_iteration = 1000000
workers = 2
iterations = 10
[[schemes]]
name = "cubic"
cc = "cubic"
mltcp = false
"""
FULL_CLUSTER = """
name = "full"
description = "every key"
schedulers = ["fifo/first_fit+backfill", "srtf/consolidated+preempt+backfill"]
networks = ["fair", "mltcp"]
seeds = [0, 1]
f_steps = 8
[cluster]
leaves = 2
servers_per_leaf = 2
spines = 1
gpus_per_server = 4
server_gbit = 10
oversubscription = 2
mtu_bytes = 1500
rails = 1
[jobs.poisson]
n = 12
load = 0.5
models = { "resnet50" = 2, "bert" = 1 }
gpus = { "2" = 1, "4" = 2 }
iterations = [20, 40]
seed = 3
"""
LIST_CLUSTER = """
schedulers = ["fifo/random"]
seeds = "0-2"
[cluster]
leaves = 1
servers_per_leaf = 2
spines = 1
[jobs.poisson]
n = 4
jobs_per_hour = 900
models = ["resnet50"]
gpus = [4, 8]
iterations = 30
"""
SETUP_CLUSTER = """
schedulers = ["fifo/first_fit"]
[jobs]
setup = { name = "deepshare-normal", first = 4 }
"""
FULL_INVENTORY = """
[defaults]
user = "root"
port = 22
key = "id_lab"
python = "/opt/mltcp/.venv/bin/python"
known_hosts = "known"

[[hosts]]
name = "gpu1"
ssh = "10.0.0.11"
data_addr = "192.168.50.11"
data_iface = "ens1f0"
gpus = 8
user = "lab"
port = 2222
key = "id_lab"
python = "/usr/bin/python3"
known_hosts = "known"

[[hosts]]
name = "gpu2"
ssh = "gpu2.lab.example"
data_addr = "fd00::12"
data_iface = "ens1f0"
"""
FULL_JOBS = """
modules = ["cubic", "reno"]

[[job]]
name = "a"
cc = "mltcp_cubic"
budget = 150000000
preset = "default"
slope = 2.0
intercept = 1.0
cap = 2.5
gap_ms = 5
stale_s = 30
cgroup = "training/a"
whole_host = false
signal = true
dst = ["10.0.0.0/24:29500-29600"]
port = [29500, "29501-29510"]
local_port = 29700

[[job]]
name = "b"
gradient_bytes = 100000000
workers = 4
collective = "parameter_server"
role = "worker"
servers = 2
dst = "10.0.1.7"

[[job]]
name = "c"
learn = true
port = 29600

[[job]]
name = "d"
gradient_bytes = 100000000
workers = 8
cgroup = "training/d"
"""

BASES: dict[str, list[str]] = {
    "scenario": [FULL_SCENARIO, LEAF_SPINE],
    "cluster": [FULL_CLUSTER, LIST_CLUSTER, SETUP_CLUSTER],
    "inventory": [FULL_INVENTORY],
    "jobs": [FULL_JOBS],
}


@pytest.fixture
def where(ssh_home: Path) -> Path:
    """The directory the bases are read in: the inventory's key and known_hosts beside
    them, and in ~/.ssh."""
    (ssh_home / "id_lab").write_text("key\n")
    (ssh_home / "id_lab").chmod(0o600)
    (ssh_home / "known").write_text("10.0.0.11 ssh-ed25519 AAAA\n")
    return ssh_home


def _bases(name: str) -> list[dict]:
    out = [tomllib.loads(text) for text in BASES[name]]
    out += [tomllib.loads(text) for n, _, text in EXAMPLES if n == name]
    return out


@pytest.mark.parametrize("name", NAMES)
def test_the_complete_files_are_valid(name: str, where: Path) -> None:
    for data in [tomllib.loads(text) for text in BASES[name]]:
        assert list(VALIDATORS[name].iter_errors(data)) == []
        assert parser_says(name, data, where) is None


# --------------------------------------------------------------------------- walking a schema


def _follow(root: dict, node: Any) -> Any:
    """``node``, or what its ``$ref`` (a JSON pointer into ``root``) names."""
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        node = root
        for part in ref[2:].split("/"):
            node = node[part]
    return node


_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool,
               "integer": int, "number": (int, float)}


def _fits(node: Any, value: object) -> bool:
    kind = node.get("type") if isinstance(node, dict) else None
    if kind is None:
        return True
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    return isinstance(value, _JSON_TYPES[kind])


def expand(name: str, node: Any, value: object) -> list[dict]:
    """The schema nodes that apply to ``value`` at ``node``: ``$ref`` followed, ``allOf``
    and ``if``/``then``/``else`` (decided on ``value``) entered, and the branches of
    ``anyOf``/``oneOf`` whose type ``value`` has."""
    root = VALIDATORS[name].schema
    node = _follow(root, node)
    if not isinstance(node, dict):
        return []
    out = [node]
    for sub in node.get("allOf", []):
        out += expand(name, sub, value)
    if "if" in node:
        passed = VALIDATORS[name].evolve(schema=node["if"]).is_valid(value)
        branch = node.get("then" if passed else "else")
        if branch is not None:
            out += expand(name, branch, value)
    for key in ("anyOf", "oneOf"):
        for sub in node.get(key, []):
            if _fits(_follow(root, sub), value):
                out += expand(name, sub, value)
    return out


Path_ = tuple[str | int, ...]


def walk(name: str, data: object) -> Iterator[tuple[Path_, object, list[dict]]]:
    """Every location of ``data``: its path, value and the schema nodes that apply."""
    def go(path: Path_, value: object, nodes: list[dict]) -> Iterator:
        yield path, value, nodes
        if isinstance(value, dict):
            for key, item in value.items():
                subs = [n["properties"][key] for n in nodes
                        if key in n.get("properties", {})]
                subs += [n["additionalProperties"] for n in nodes
                         if isinstance(n.get("additionalProperties"), dict)]
                yield from go((*path, key), item,
                              [e for s in subs for e in expand(name, s, item)])
        elif isinstance(value, list):
            for i, item in enumerate(value):
                subs = [n["items"] for n in nodes if isinstance(n.get("items"), dict)]
                yield from go((*path, i), item, [e for s in subs for e in expand(name, s, item)])

    yield from go((), data, expand(name, VALIDATORS[name].schema, data))


def render(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _set(data: dict, path: Path_, value: object) -> dict:
    out = copy.deepcopy(data)
    target: Any = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return out


def _names_field(err: SpecError, path: Path_) -> bool:
    """The refusal names ``path``, the list it is an item of (``port`` for ``port[1]``),
    or an item of it (``iterations[0]`` for ``iterations = 0``, read as [0, 0])."""
    field, here = err.field, render(path)
    return field == here or here.startswith(field + "[") or field.startswith(here + "[")


# --------------------------------------------------------------------------- keys


@pytest.mark.parametrize("name", NAMES)
def test_every_table_has_the_parsers_keys(name: str, where: Path) -> None:
    """An unknown key in any table of any base is refused by both; the keys the parser
    then offers are the schema's.  Every table of the schema is reached."""
    tables: set[int] = set()
    for base in _bases(name):
        for path, value, nodes in walk(name, base):
            if not isinstance(value, dict):
                continue
            bad = _set(base, (*path, BOGUS), 1) if path else {**base, BOGUS: 1}
            err = parser_says(name, bad, where)
            assert err is not None and not schema_takes(name, bad), (render(path), err)
            closed = [n for n in nodes if n.get("additionalProperties") is False]
            if err.problem != "unknown key":      # a table of names (models, gpus)
                assert not closed, (render(path), err)
                continue
            assert err.field == render((*path, BOGUS)), err
            offered = err.fix.rpartition("use one of: ")[2].split(", ")
            assert len(closed) == 1, render(path)
            assert list(closed[0]["properties"]) == offered, render(path)
            tables.add(id(closed[0]))
    root = VALIDATORS[name].schema
    every = [n for n in _nodes(root) if n.get("additionalProperties") is False]
    missed = [n.get("title", n.get("description", "")[:40]) for n in every
              if id(n) not in tables]
    assert missed == [], f"tables no base reaches: {missed}"


def _nodes(node: Any) -> Iterator[dict]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


# --------------------------------------------------------------------------- bounds


def _bounds(nodes: list[dict]) -> tuple[str, tuple[float, bool] | None,
                                         tuple[float, bool] | None, list[int]]:
    """(type, (low, open) or None, (high, open) or None, the nodes giving them) of a
    numeric location: the tightest of every node that applies."""
    kind, lo, hi, ids = "number", None, None, []
    for n in nodes:
        if n.get("type") == "integer":
            kind = "integer"
        for key, is_open in (("minimum", False), ("exclusiveMinimum", True)):
            if key in n:
                ids.append(id(n))
                if lo is None or n[key] > lo[0] or (n[key] == lo[0] and is_open):
                    lo = (n[key], is_open)
        for key, is_open in (("maximum", False), ("exclusiveMaximum", True)):
            if key in n:
                ids.append(id(n))
                if hi is None or n[key] < hi[0] or (n[key] == hi[0] and is_open):
                    hi = (n[key], is_open)
    return kind, lo, hi, ids


def _step(kind: str, bound: float) -> float:
    return 1 if kind == "integer" else max(abs(bound) * 1e-3, 1e-3)


def _value(kind: str, x: float) -> int | float:
    return int(x) if kind == "integer" else float(x)


@pytest.mark.parametrize("name", NAMES)
def test_every_bound_is_the_parsers(name: str, where: Path) -> None:
    """At an inclusive bound the parser takes the value, or refuses it for another
    reason than this field's range; past it (or at an exclusive bound) it refuses it
    naming the field, and the schema refuses it too.  Every bound is probed."""
    probed: set[int] = set()
    problems: list[str] = []
    for base in _bases(name):
        for path, value, nodes in walk(name, base):
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            kind, lo, hi, ids = _bounds(nodes)
            for bound, sign in ((lo, -1), (hi, 1)):
                if bound is None:
                    continue
                at, is_open = bound
                step = _step(kind, at)
                where_ = f"{render(path)} = {{}} (bound {at})"
                if not is_open:      # refused only for another reason (a duplicate seed)
                    inside = _set(base, path, _value(kind, at))
                    err = parser_says(name, inside, where)
                    if err is not None and _names_field(err, path) and RANGE.search(
                            err.problem):
                        problems.append(f"{where_.format(at)}: the parser refuses: {err}")
                    if err is None and not schema_takes(name, inside):
                        problems.append(f"{where_.format(at)}: the schema refuses it")
                past = at if is_open else at + sign * step
                outside = _set(base, path, _value(kind, past))
                err = parser_says(name, outside, where)
                if err is None or not _names_field(err, path):
                    problems.append(f"{where_.format(past)}: the parser says {err}")
                if schema_takes(name, outside):
                    problems.append(f"{where_.format(past)}: the schema takes it")
            probed.update(ids)
    assert problems == []
    root = VALIDATORS[name].schema
    bounded = [n for n in _nodes(root) if n.get("type") in ("integer", "number")
               and {"minimum", "maximum", "exclusiveMinimum"} & set(n)]
    missed = [n.get("description", json.dumps(n))[:60] for n in bounded
              if id(n) not in probed]
    assert missed == [], f"bounds no base probes: {missed}"


# --------------------------------------------------------------------------- types

WRONG = (5, 1.5, -1, "x", True, [], [1], {}, {"a": 1})
# What a parser takes that its schema refuses, and why the schema is right.
PARSER_GAPS: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("name", NAMES)
def test_a_value_of_another_type_is_refused_by_both(name: str, where: Path) -> None:
    """Every location of every base given a value of each other type: what the schema
    refuses the parser refuses, and what the parser refuses naming that field for its
    type, range or choice the schema refuses too."""
    problems = []
    for base in _bases(name):
        for path, value, _ in walk(name, base):
            if not path:
                continue
            for wrong in WRONG:
                if type(wrong) is type(value) and not isinstance(wrong, list | dict):
                    continue
                data = _set(base, path, wrong)
                try:
                    err: Exception | None = parser_says(name, data, where)
                except Exception as exc:     # a refusal, if not a clean one (a crash)
                    err = exc
                takes = schema_takes(name, data)
                here = f"{render(path)} = {wrong!r}"
                key = str(path[-1]) if path else ""
                if not takes and err is None and (name, key) not in PARSER_GAPS:
                    problems.append(f"{here}: the schema refuses what the parser takes")
                if takes and isinstance(err, SpecError) and _names_field(err, path) \
                        and STRUCTURAL.search(err.problem):
                    problems.append(f"{here}: the schema takes what the parser refuses: {err}")
    assert problems == []


# --------------------------------------------------------------------------- bad input

# A refusal for what a schema can say: an unknown key, a type, a range, a choice, a name,
# a missing key, keys that exclude one another.
STRUCTURAL = re.compile(
    r"unknown key|must be (a |an |true or false|between|[<>])|out of range|unknown value"
    r"|unknown (topology kind|congestion control|schedule|DCQCN|choice|scheme|scheduler"
    r"|flag|setup|model|preset|role|collective)|is missing|^missing$|^is empty"
    r"|is not a valid name|only applies|does not apply|is reserved|is listed twice"
    r"|duplicate seed|needs exactly one|has none of|more than one of|given together with"
    r"|is derived for|must be a non-empty|at least one|is given twice|not an interface name"
    r"|holds whitespace|characters: a host name|is neither an IP address|is not an IP"
    r"|is not a port|is an address label")
# A field of the TOML file itself (not a row of a CSV trace it names, nor a flag).
TOML_FIELD = re.compile(r"[A-Za-z_]\w*(?:\[\d+\]|\.[^\s:]+)*")


def _format_of(argv: tuple[str, ...], file: str) -> str | None:
    """Which format the row's file ``file`` is for the command ``argv``."""
    tokens = [a.replace("{dir}/", "") for a in argv]
    if file not in tokens:
        return None
    before = tokens[tokens.index(file) - 1]
    if before == "--inventory":
        return "inventory"
    if before == "--config" or "apply" in tokens:
        return "jobs"
    if tokens[:2] == ["cluster", "run"]:
        return "cluster"
    if tokens[0] in ("run", "compare", "sweep"):
        return "scenario"
    return None


def _bad_inputs() -> Iterator[tuple[str, str, dict, dict[str, str | bytes]]]:
    """(format, label, data, the files beside it) of every known-bad TOML input."""
    from tests import test_bad_input, test_inventory_bad_input, test_workload_table

    for row in test_bad_input.ROWS:
        for file, content in row.files:
            name = _format_of(row.argv, file) if file.endswith(".toml") else None
            if name is None:
                continue
            raw = content.encode() if isinstance(content, str) else content
            try:
                data = tomllib.loads(raw.decode("utf-8").removeprefix("\ufeff"))
            except (UnicodeDecodeError, tomllib.TOMLDecodeError):
                continue                  # not TOML: nothing for a schema to say
            yield name, f"bad-input row {row.cell}", data, dict(row.files)
    host = test_inventory_bad_input._host
    mod = test_inventory_bad_input
    for fn, key in ((mod.test_an_address_no_host_can_have_is_refused, "data_addr"),
                    (mod.test_an_ssh_name_that_is_neither_address_nor_name_is_refused, "ssh"),
                    (mod.test_an_interface_name_linux_refuses_is_refused, "data_iface")):
        for value, _ in _parametrized(fn):
            yield "inventory", f"{fn.__name__}[{value}]", {"hosts": [host(**{key: value})]}, {}
    for python in _parametrized(mod.test_python_is_one_path):
        yield "inventory", f"python {python!r}", {"defaults": {"python": python},
                                                  "hosts": [host()]}, {}
    for table, _, _ in _parametrized(
            test_workload_table.test_a_table_the_workload_refuses_is_refused_naming_its_field):
        if isinstance(table.get("gpu_time_ms"), float) and math.isinf(table["gpu_time_ms"]):
            continue                      # TOML's inf, which JSON has not
        yield "scenario", f"workload {table}", test_workload_table._scenario(table), {}


def _parametrized(fn: Callable) -> list:
    return list(next(m for m in fn.pytestmark if m.name == "parametrize").args[1])


BAD = list(_bad_inputs())


def test_there_are_bad_inputs_of_every_format() -> None:
    counts = {name: sum(1 for n, *_ in BAD if n == name) for name in NAMES}
    assert all(counts[n] >= 3 for n in NAMES), counts


@pytest.mark.parametrize(("name", "label", "data", "files"), BAD,
                         ids=[f"{n}:{label[:60]}" for n, label, _, _ in BAD])
def test_a_bad_input_is_refused_by_the_schema_where_it_can_say_why(
        name: str, label: str, data: dict, files: dict, tmp_path: Path) -> None:
    for file, content in files.items():
        path = tmp_path / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    directory = tmp_path / Path(next((f for f in files if f.endswith(".toml")
                                      and _is_format(f, name)), "x")).parent
    err = parser_says(name, data, directory)
    takes = schema_takes(name, data)
    if not takes:
        assert err is not None, f"{label}: the schema refuses what the parser takes"
    if err is not None and TOML_FIELD.fullmatch(err.field) and STRUCTURAL.search(err.problem):
        assert not takes, f"{label}: the parser refuses it ({err}) and the schema takes it"


def _is_format(file: str, name: str) -> bool:
    return {"inventory": "inv", "jobs": "jobs", "cluster": "c.", "scenario": "s."}[name] \
        in Path(file).name

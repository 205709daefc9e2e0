#!/usr/bin/env python3
"""Write the JSON Schemas of mltcp's TOML files into ``mltcp/schemas/`` (shipped in the
package), generated from the parsers' own definitions.

    .venv/bin/python scripts/schemas.py           # write the four files
    .venv/bin/python scripts/schemas.py --check   # exit 1 naming each file that is stale

The schemas are editor tooling (completion, hover text, errors as one types, e.g. Even
Better TOML / taplo), never a second validator: the parsers stay the only judges of a
file (``core/validate.py``, "one validator module").  So that they cannot drift apart,
this script builds every schema from what the parsers read: each table's keys from the
parser's known-keys table (a key of the table without a schema here, or one here that
the parser does not take, stops the script), the enumerations from the code's own
(congestion controls, collectives, models, schedulers, network schemes, setups ...),
names from the parsers' regular expressions, limits from their constants, defaults from
the dataclasses.  A bound that a parser writes inline (``validate.integer(v, f, 1, 256)``)
is restated here and checked by tests/test_schemas.py, which probes every bound of every
schema against the parser (at the bound and just past it), injects an unknown key into
every table to compare key sets, and compares the shipped files with this script's.

A schema says what its format's parser refuses *where JSON Schema can say it*: unknown
keys, types, ranges, choices, names, required keys, keys that exclude one another.  What
it cannot (a file that must exist, a host address that is loopback, a model too large
for memory, a placement that does not cross the bottleneck) only the parser refuses; a
schema never refuses what the parser takes (but numbers in non-ASCII digits, and
``PARSER_GAPS`` in the test).  Only keywords that draft-07 validators also know are used
(no ``dependentRequired``, ``prefixItems`` or ``$dynamicRef``), so that editors on older
drafts read them too; ``$defs`` are reached by JSON pointer.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mltcp.core import aggressiveness, validate  # noqa: E402
from mltcp.core import workload as workload_rules  # noqa: E402
from mltcp.core.budget import ROLES, Collective  # noqa: E402
from mltcp.host import datapath, jobfile, jobs  # noqa: E402
from mltcp.lab.cluster.arrivals import catalogue  # noqa: E402
from mltcp.lab.cluster.engine.leafspine import LeafSpine  # noqa: E402
from mltcp.lab.cluster.experiments import config, registry  # noqa: E402
from mltcp.lab.cluster.papers import setups  # noqa: E402
from mltcp.lab.scenario import spec  # noqa: E402
from mltcp.lab.scenario.hosts import inventory  # noqa: E402

OUT = REPO / "mltcp" / "schemas"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
Schema = dict[str, Any]


# --------------------------------------------------------------------------- building blocks


def plain(text: str) -> str:
    """reST as plain text on one line: roles and literals unwrapped."""
    text = re.sub(r":[a-z]+:`~?(?:[\w.]+\.)?([\w]+)`", r"\1", text)
    return " ".join(text.replace("``", "`").replace("::", ":").split())


def doc(obj: object) -> str:
    """A docstring as one paragraph of plain text."""
    return plain(inspect.getdoc(obj) or "")


def first_paragraph(obj: object) -> str:
    return plain((inspect.getdoc(obj) or "").split("\n\n")[0])


def anchored(pattern: re.Pattern[str] | str) -> str:
    """A Python name pattern (matched whole, ``fullmatch``) as an anchored JSON Schema
    pattern; the project's name patterns use only syntax ECMA-262 shares."""
    text = pattern if isinstance(pattern, str) else pattern.pattern
    return f"^(?:{text.removeprefix('^').removesuffix('$')})$"


def literal(word: str) -> str:
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", word)


def any_case(word: str, dashes: bool = True) -> str:
    """``word`` in any case and, with ``dashes``, ``-`` or ``_`` alike (how
    ``Collective.parse`` reads a name)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha()
                   else "[-_]" if dashes and c in "-_" else literal(c) for c in word)


def field_default(cls: type, name: str) -> Any:
    """The dataclass field's default, or ``dataclasses.MISSING``."""
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == name:
            return f.default
    raise KeyError(f"{cls.__name__} has no field {name}")


def with_default(schema: Schema, cls: type, name: str) -> Schema:
    value = field_default(cls, name)
    if value is dataclasses.MISSING or value is None:
        return schema
    if isinstance(value, Collective):
        value = value.value
    return {**schema, "default": value}


def integer(description: str, lo: int | None = None, hi: int | None = None) -> Schema:
    out: Schema = {"type": "integer", "description": description}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def number(description: str, lo: float | None = None, hi: float | None = None, *,
           lo_open: bool = False) -> Schema:
    out: Schema = {"type": "number", "description": description}
    if lo is not None:
        out["exclusiveMinimum" if lo_open else "minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def string(description: str, **kw: Any) -> Schema:
    return {"type": "string", "description": description, **kw}


def boolean(description: str) -> Schema:
    return {"type": "boolean", "description": description}


def choice(description: str, values: Iterable[str]) -> Schema:
    return {"type": "string", "enum": list(values), "description": description}


def _size_pattern() -> str:
    """``validate.parse_bytes``'s syntax: a positive number and a unit of ``_UNITS`` in
    any case ("10MB", "4MiB", "1.5GB", "64k", "123"); a sign other than ``+`` and an
    all-zero number are refused (a fraction of a byte only by the parser)."""
    units = sorted(validate._UNITS, key=len, reverse=True)
    unit = "|".join(any_case(u) for u in units if u)
    return (r"^\s*\+?(?=[0-9.]*[1-9])(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*"
            f"(?:{unit})?" r"\s*$")


SIZE_PATTERN = _size_pattern()


def size(description: str, lo: int = 1, hi: int | None = None) -> Schema:
    """A byte count: a positive integer or a size string."""
    number_form: Schema = {"type": "integer", "minimum": lo}
    if hi is not None:
        number_form["maximum"] = hi
    return {"description": description, "anyOf": [
        number_form, {"type": "string", "pattern": SIZE_PATTERN}]}


def table(keys: Iterable[str], properties: Mapping[str, Schema], description: str, *,
          required: Iterable[str] = (), title: str | None = None, **extra: Any) -> Schema:
    """A table whose keys are exactly the parser's ``keys`` (in its order), unknown keys
    refused.  A key without a schema here, or a schema for a key the parser does not
    take, is an error: the parser's table is the source."""
    keys = tuple(keys)
    missing = [k for k in keys if k not in properties]
    extra_keys = [k for k in properties if k not in keys]
    if missing or extra_keys:
        raise SystemExit(f"schemas.py: the parser's keys {keys} and the schema's differ: "
                         f"no schema for {missing}, no such key for {extra_keys}")
    out: Schema = {"type": "object"}
    if title:
        out["title"] = title
    out["description"] = description
    out["properties"] = {k: properties[k] for k in keys}
    out["additionalProperties"] = False
    if required:
        out["required"] = list(required)
    out.update(extra)
    return out


def forbid(keys: Iterable[str]) -> Schema:
    """The keys must be absent (a table where they do not apply)."""
    return {"properties": {k: False for k in keys}}


def seed_list(description: str) -> Schema:
    return {"type": "array", "description": description, "minItems": 1,
            "maxItems": validate.MAX_SEEDS, "uniqueItems": True,
            "items": {"type": "integer", "minimum": 0, "maximum": validate.MAX_SEED}}


_SEED_NUMBER = r"\s*\+?[0-9](?:_?[0-9])*\s*"
SEED_RANGE_PATTERN = (f"^(?:{_SEED_NUMBER}(?:-{_SEED_NUMBER})?)"
                      f"(?:,{_SEED_NUMBER}(?:-{_SEED_NUMBER})?)*$")
IPV4 = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}"  # noqa: E501
IPV6 = r"[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*"


def document(name: str, title: str, description: str, body: Schema,
             defs: Mapping[str, Schema] | None = None) -> Schema:
    head: Schema = {"$schema": DRAFT, "$id": f"urn:mltcp:schema:{name}", "title": title,
                    "description": description}
    out = {**head, **body}
    if defs:
        out["$defs"] = dict(defs)
    return out


def ref(name: str) -> Schema:
    return {"$ref": f"#/$defs/{name}"}


# --------------------------------------------------------------------------- the scenario


def scenario_schema() -> Schema:
    s = spec
    topology_props: dict[str, Schema] = {
        "kind": choice("The network: a `dumbbell` (hosts h1..hN, the first half left of one "
                       "bottleneck link, the rest right) or a `leaf_spine`.",
                       s.TOPOLOGY_KINDS),
        "host_link_mbit": number("Every host link's rate, Mbit/s (dumbbell default: 10 x "
                                 "bottleneck_mbit, at most the maximum; never below it).",
                                 1, s.MAX_LINK_MBIT),
        "queue_packets": integer("Every shaped link's queue, in full-size frames.", 10,
                                 s.MAX_QUEUE_PACKETS),
        "ecn_threshold_bytes": size("Mark ECN-capable packets above this backlog, bytes (or "
                                    '"100KB"): at least 1500 and below the queue '
                                    "(queue_packets x (mtu_bytes + 14)); needed by a dctcp "
                                    "scheme; omit for a drop-tail queue.", 1500),
        "gso_max_segs": integer("Emulation only: the largest burst, in segments, a host "
                                "hands its device at once (1: single packets, as with TSO "
                                "off); omit for the device default.", 1, s.MAX_GSO_SEGS),
        "rto_min_ms": number("Emulation only: the hosts' minimum retransmission timeout, ms; "
                             "omit for Linux's 200 ms.", 1, 200),
        "mtu_bytes": with_default(integer("Every link's MTU: 1500, or jumbo frames (9000).",
                                          s.MIN_MTU, s.MAX_MTU), s.Topology, "mtu_bytes"),
        "bottleneck_mbit": number("Dumbbell: the bottleneck link's rate, Mbit/s (derived for "
                                  "a leaf_spine).", 1, s.MAX_LINK_MBIT),
        "hosts": integer("Dumbbell: how many hosts (h1..hN; derived for a leaf_spine).", 2,
                         s.MAX_HOSTS),
        "leaves": integer("Leaf-spine: leaf switches.", 2, 256),
        "spines": integer("Leaf-spine: spine switches (each leaf's uplink capacity is split "
                          "evenly over them).", 1, 256),
        "hosts_per_leaf": integer("Leaf-spine: hosts under each leaf (leaves x hosts_per_leaf "
                                  f"at most {s.MAX_HOSTS}).", 1, 256),
        "oversubscription": number("Leaf-spine: a leaf's host capacity over its uplink "
                                   "capacity (1: non-blocking).", 1.0, 64.0),
    }
    topology = table(
        s._TOPOLOGY_KEYS, topology_props, "The network every backend builds; hosts are "
        "named h1..hN. A dumbbell: h1..h(N/2) left of one bottleneck link, the rest right. A "
        "leaf_spine: leaf k (from 0) holds h(kP+1)..h((k+1)P), P = hosts_per_leaf; each leaf's "
        "uplink capacity, P x host_link_mbit / oversubscription, is split evenly over the "
        "spines.", title="[topology]",
        required=("kind", "queue_packets"),
        allOf=[
            {"if": {"properties": {"kind": {"const": "dumbbell"}}},
             "then": {"required": ["bottleneck_mbit", "hosts"],
                      **forbid(s._LEAF_SPINE_KEYS)}},
            {"if": {"properties": {"kind": {"const": "leaf_spine"}}},
             "then": {"required": ["host_link_mbit", *s._LEAF_SPINE_KEYS],
                      **forbid(s._DUMBBELL_KEYS)}},
        ])
    phase = table(s._PHASE_KEYS, {
        "compute_ms": number("This step's compute, ms.", 0, s.MAX_COMPUTE_MS),
        "share": number("This step's share of the iteration's bytes (the shares add up to "
                        "1).", 0, 1, lo_open=True),
    }, doc(s.JobPhase), required=s._PHASE_KEYS)
    size_keys = {"d_model": "width", "layers": "layers", "heads":
                 "attention heads (dividing d_model)", "seq": "sequence length",
                 "vocab": "vocabulary"}
    size_bounds = {"d_model": (8, 16384), "layers": (1, 256), "heads": (1, 256),
                   "seq": (2, 65536), "vocab": (2, 1_000_000)}
    workload_props: dict[str, Schema] = {
        "model": choice("The architecture the bundled DDP workload trains.",
                        workload_rules.MODELS),
        "batch": with_default(integer("Samples per rank per iteration.", 1, 65536),
                              s.Workload, "batch"),
        "preset": choice("Transformer only: its size (" + "; ".join(
            f"{k}: d_model {v.d_model}, {v.layers} layers, {v.heads} heads, seq {v.seq}, vocab "
            f"{v.vocab}" for k, v in workload_rules.PRESETS.items()) + "); default small.",
            workload_rules.PRESETS),
        "backend": with_default(choice("The collective library: gloo (CPU hosts) or nccl "
                                       "(GPU hosts), over TCP sockets.", s.WORKLOAD_BACKENDS),
                                s.Workload, "backend"),
        "gpu_time_ms": with_default(number("A compute pad before each forward pass, ms: a "
                                           "CPU host standing in for a GPU.", 0, 600_000),
                                    s.Workload, "gpu_time_ms"),
        "signal": with_default(boolean("Whether the training-loop hook signals each "
                                       "iteration's end to the datapath."),
                               s.Workload, "signal"),
        **{k: integer(f"Transformer only: {what} (overrides the preset's).", *size_bounds[k])
           for k, what in size_keys.items()},
        "image_size": integer("CNNs only: the image side, pixels (default 32).", 32, 1024),
    }
    assert tuple(size_keys) == s.WORKLOAD_SIZE_KEYS and s.WORKLOAD_IMAGE_KEYS == ("image_size",)
    workload = table(
        s._WORKLOAD_KEYS, workload_props, doc(s.Workload) + " Checked by the workload's own "
        "rules when the scenario is read (a model that fits no rank's memory too).",
        required=("model",),
        allOf=[{"if": {"properties": {"model": {"const": workload_rules.TRANSFORMER}}},
                "then": forbid(s.WORKLOAD_IMAGE_KEYS),
                "else": forbid(("preset", *s.WORKLOAD_SIZE_KEYS))}])
    collectives = [c.value for c in Collective]
    job_props: dict[str, Schema] = {
        "name": string("The job's name, unique in the scenario.",
                       pattern=anchored(s._JOB_NAME)),
        "compute_ms": number("Compute per iteration, ms (or phases).", 0, s.MAX_COMPUTE_MS,
                             lo_open=True),
        "bytes_per_iteration": size("The gradient size G each worker holds, bytes or "
                                    '"10MB" (what a worker sends depends on the collective: '
                                    "ring 2(N-1)/N x G).", 1, aggressiveness.MAX_BUDGET_BYTES),
        "workers": integer("Workers, one host each (at most the topology's hosts).", 2,
                           s.MAX_HOSTS),
        "placement": {"type": "array", "description": "The hosts of the workers, one each "
                      "(h1..hN), crossing the bottleneck; omit for automatic placement.",
                      "uniqueItems": True, "minItems": 2,
                      "items": {"type": "string", "pattern": r"^h[1-9][0-9]*$"}},
        "connections": with_default(integer("TCP connections each worker opens to its "
                                            "successor in the ring.", 1, 16),
                                    s.ScenarioJob, "connections"),
        "start_offset_ms": with_default(number("When the job starts, ms after the run's "
                                               "start.", 0, s.MAX_START_OFFSET_MS),
                                        s.ScenarioJob, "start_offset_ms"),
        "iterations": integer("Training iterations.", 1, s.MAX_ITERATIONS),
        "collective": with_default({
            "type": "string", "description": "The communication pattern of an iteration: "
            + ", ".join(collectives) + " (any case, '-' or '_').",
            "anyOf": [{"enum": collectives},
                      {"pattern": "^\\s*(?:" + "|".join(any_case(c) for c in collectives)
                       + ")\\s*$"}]}, s.ScenarioJob, "collective"),
        "phases": {"type": "array", "description": "Model parallelism: the iteration as "
                   f"2-{s.MAX_PHASES} steps of compute then a share of the bytes (instead of "
                   "compute_ms).", "minItems": 2, "maxItems": s.MAX_PHASES,
                   "items": ref("phase")},
        "compute_jitter_ms": with_default(number(
            "Standard deviation of a per-iteration Gaussian added to the compute, ms.",
            0, s.MAX_COMPUTE_MS), s.ScenarioJob, "compute_jitter_ms"),
        "workload": ref("workload"),
    }
    job = table(s._JOB_KEYS, job_props, "One synthetic training job: compute, then "
                "exchange its gradient, `iterations` times; `phases` (model parallelism) "
                "splits an iteration into several compute + communication steps. With a "
                "`workload`, the hosts backend runs real training instead.",
                title="[[jobs]]",
                required=("name", "bytes_per_iteration", "workers", "iterations"),
                oneOf=[{"required": ["compute_ms"]}, {"required": ["phases"]}])
    f_keys = {k: None for k in s._F_KEYS}
    scheme_props: dict[str, Schema] = {
        "name": {"type": "string", "description": "The scheme's name, unique ("
                 + ", ".join(repr(n) for n in s.RESERVED_SCHEME_NAMES)
                 + " is the baseline's).", "pattern": anchored(s._SCHEME_NAME),
                 "not": {"enum": list(s.RESERVED_SCHEME_NAMES)}},
        "cc": choice("The congestion control (ignored by the dcqcn backend).", s.CC_NAMES),
        "mltcp": boolean("MLTCP (F scales the window growth) or the standard algorithm."),
        "slope": with_default(number("F's slope: F = intercept + slope x bytes_ratio.", 0,
                                     aggressiveness.MAX_SLOPE), aggressiveness.Aggressiveness,
                              "slope"),
        "intercept": with_default(number(
            f"F's intercept (at least 1/{aggressiveness.FP_ONE}).", 0,
            aggressiveness.MAX_INTERCEPT, lo_open=True), aggressiveness.Aggressiveness,
            "intercept"),
        "cap": number("F's cap (at least the intercept); omit for none.", 0,
                      aggressiveness.MAX_CAP, lo_open=True),
        "dcqcn_mode": choice("How the dcqcn backend puts F on DCQCN: timer (divide the "
                             "rate-increase timers by F) or rates (scale the increase rates "
                             "by F); omit for the tuner's default.", s.DCQCN_MODES),
        "schedule": with_default(choice("A centralized schedule before the jobs start "
                                        "(cassini: Cassini's time-shifts; standard "
                                        "algorithm only).", s.SCHEDULES), s.Scheme,
                                 "schedule"),
    }
    scheme = table(s._SCHEME_KEYS, scheme_props, "A congestion-control setting to "
                   "compare: the standard `cc` (F = 1), or its MLTCP version with F = "
                   "intercept + slope x bytes_ratio (capped); `schedule = \"cassini\"` runs "
                   "the standard algorithm after Cassini's time-shifts of the jobs' starts "
                   "(the centralized baseline). Each job alone (\"dedicated\") is run by "
                   "every backend itself.", title="[[schemes]]",
                   required=("name", "cc", "mltcp"),
                   allOf=[{"if": {"properties": {"mltcp": {"const": False}}},
                           "then": forbid(f_keys)},
                          {"if": {"properties": {"mltcp": {"const": True}}},
                           "then": {"properties": {"schedule": {"const": "none"}}}}])
    top_props: dict[str, Schema] = {
        "name": string("The scenario's name (a packaged example is loaded by it).",
                       pattern=anchored(s._SCENARIO_NAME)),
        "description": string("What the scenario shows."),
        "seeds": {**seed_list("The seeds every scheme runs (each its own run)."),
                  "default": [0]},
        "topology": ref("topology"),
        "jobs": {"type": "array", "description": "The training jobs ([[jobs]]), names "
                 "unique.", "minItems": 1, "items": ref("job")},
        "schemes": {"type": "array", "description": "The schemes to compare ([[schemes]]), "
                    "names unique.", "minItems": 1, "items": ref("scheme")},
        "record_links": {"description": "Which links every trace samples: "
                         + ", ".join(f'"{c}"' for c in s.RECORD_LINKS)
                         + " (default \"fabric\": the switch-to-switch links), or a list of "
                         "the topology's link ids (an id without ':' names both directions).",
                         "default": s.DEFAULT_RECORD_LINKS,
                         "anyOf": [{"type": "string", "enum": list(s.RECORD_LINKS)},
                                   {"type": "array", "uniqueItems": True,
                                    "items": {"type": "string"}}]},
    }
    body = table(s._TOP_KEYS, top_props, "", required=("name", "topology", "jobs", "schemes"))
    del body["description"]
    return document("scenario", "mltcp scenario", first_paragraph(s) + " A scenario: its "
                    "topology, jobs, the schemes to compare and their seeds "
                    "(`mltcp run|compare|sweep FILE`).", body,
                    {"topology": topology, "job": job, "phase": phase,
                     "workload": workload, "scheme": scheme})


# --------------------------------------------------------------------------- cluster experiments


LEAFSPINE_BOUNDS: dict[str, tuple[float, float]] = {   # LeafSpine.__post_init__'s
    "leaves": (1, 4096), "servers_per_leaf": (1, 1024), "spines": (1, 1024),
    "gpus_per_server": (1, 64), "server_gbit": (0, 10_000), "oversubscription": (1, 64),
    "mtu_bytes": (576, 9216), "rails": (1, 64)}
LEAFSPINE_TEXT = {
    "leaves": "Leaf switches.", "servers_per_leaf": "Servers under each leaf.",
    "spines": "Spine switches.", "gpus_per_server": "GPUs of a server.",
    "server_gbit": "Each NIC's rate, Gbit/s.",
    "oversubscription": "The leaves' uplink oversubscription (1: non-blocking).",
    "mtu_bytes": "The links' MTU.", "rails": "NICs per server (rails), each its own link."}


def _leafspine_field(f: dataclasses.Field) -> Schema:
    lo, hi = LEAFSPINE_BOUNDS[f.name]
    text = LEAFSPINE_TEXT[f.name]
    schema = (integer(text, int(lo), int(hi)) if f.type in ("int", int)
              else number(text, lo, hi, lo_open=f.name == "server_gbit"))
    return schema if f.default is dataclasses.MISSING else {**schema, "default": f.default}


def cluster_schema() -> Schema:
    c = config
    fields = {f.name: f for f in dataclasses.fields(LeafSpine)}
    cluster = table(c.CLUSTER_KEYS, {k: _leafspine_field(fields[k]) for k in c.CLUSTER_KEYS},
                    doc(LeafSpine) + " Optional with `[jobs] setup`, whose paper brings its "
                    "own cluster.", title="[cluster]",
                    required=[f for f, v in fields.items() if v.default is dataclasses.MISSING])
    models = list(catalogue.names())
    weight: Schema = {"type": "number", "exclusiveMinimum": 0, "maximum": 1e12}
    gpu_count = {"anyOf": [{"type": "integer", "minimum": 1},
                           {"type": "string", "pattern": "^[0-9]+$"}]}
    poisson = table(c.POISSON_KEYS, {
        "n": integer("How many jobs.", 1, c.MAX_JOBS),
        "jobs_per_hour": number("The arrival rate (or load).", 0, 1e9, lo_open=True),
        "load": number("The fraction of the cluster's GPUs the jobs keep busy, on average "
                       "(or jobs_per_hour).", 0, 10, lo_open=True),
        "models": {"description": "The catalogue's models (docs/cluster-catalogue.md): a list "
                   "(equally likely) or a table of name = weight.", "anyOf": [
                       {"type": "array", "minItems": 1, "uniqueItems": True,
                        "items": {"type": "string", "enum": models}},
                       {"type": "object", "minProperties": 1,
                        "propertyNames": {"enum": models}, "additionalProperties": weight}]},
        "gpus": {"description": "GPUs per job (at most the cluster's): a list (equally likely) "
                 'or a table of "count" = weight.', "anyOf": [
                     {"type": "array", "minItems": 1, "uniqueItems": True, "items": gpu_count},
                     {"type": "object", "minProperties": 1,
                      "propertyNames": {"pattern": "^[0-9]+$"},
                      "additionalProperties": weight}]},
        "iterations": {"description": "Each job's iterations, drawn from [lo, hi] (or one "
                       "number).", "anyOf": [
                           {"type": "integer", "minimum": 1, "maximum": c.MAX_ITERATIONS},
                           {"type": "array", "minItems": 2, "maxItems": 2,
                            "items": {"type": "integer", "minimum": 1,
                                      "maximum": c.MAX_ITERATIONS}}]},
        "seed": integer("Fixes the trace for every run (omit: each run's seed draws its own).",
                        0, validate.MAX_SEED),
    }, "`n` jobs drawn from the models, GPU counts and iterations given, arriving as a "
       "Poisson process at `jobs_per_hour` (or at the rate that keeps `load` of the "
       "cluster's GPUs busy); `seed` fixes the trace, else each run's seed draws its own.",
       title="poisson",
        required=("n", "models", "gpus", "iterations"),
        oneOf=[{"required": ["jobs_per_hour"]}, {"required": ["load"]}])
    setup_names = list(setups.names())
    setup_keys = ("name", "first")        # config._setup_jobs's table
    setup = {"description": first_paragraph(c.SetupJobs), "anyOf": [
        {"type": "string", "enum": setup_names},
        table(setup_keys, {"name": choice("The paper's setup.", setup_names),
                           "first": integer("Only the first so many jobs, by arrival.", 1,
                                            10**7)}, "A setup cut to its first jobs.",
              required=("name",))]}
    jobs_table = table(tuple(c.JOB_SOURCES), {
        "trace": string("A CSV job trace, relative to this file's directory.",
                        pattern=r"\S"),
        "poisson": ref("poisson"),
        "setup": setup,
    }, "Where the jobs come from: exactly one of trace, poisson, setup.", title="[jobs]",
        minProperties=1, maxProperties=1)
    orders, places = "|".join(registry.ORDERS), "|".join(registry.POLICIES)
    flags = "|".join(registry.FLAGS)
    once = "".join(f"(?!(?:.*\\+{f}){{2}})" for f in registry.FLAGS)   # each flag once
    scheduler_pattern = (
        "^(?:" + "|".join(literal(n) for n in registry.NAMED)
        + "|(?:" + "|".join(registry.RL_KINDS) + ")" + literal(registry.POLICY_SEP) + ".+"
        + f"|(?:{orders})/(?:{places}){once}(?:\\+(?:{flags}))*)$")
    top = table(c.TOP_KEYS, {
        "name": string("The experiment's name (default: the file's name).",
                       pattern=anchored(c.NAME)),
        "description": string("What it shows."),
        "cluster": ref("cluster"),
        "jobs": ref("jobs"),
        "schedulers": {"type": "array", "description": "The schedulers to compare: "
                       "ORDER/PLACEMENT[+preempt][+backfill] (ORDER: "
                       + ", ".join(registry.ORDERS) + "; PLACEMENT: "
                       + ", ".join(registry.POLICIES) + "), a paper's ("
                       + ", ".join(registry.NAMED) + "), or rl-base@POLICY.zip / "
                       "rl-hybrid@POLICY.zip (relative to this file).",
                       "minItems": 1, "uniqueItems": True,
                       "items": {"type": "string", "pattern": scheduler_pattern}},
        "networks": {"type": "array", "description": "The network schemes to compare.",
                     "default": list(c.DEFAULT_NETWORKS), "minItems": 1, "uniqueItems": True,
                     "items": {"type": "string", "enum": list(registry.NETWORKS)}},
        "seeds": {"description": 'The seeds: a list, or a range "0-4" / "0,3,7".',
                  "default": [0], "anyOf": [
                      seed_list("The seeds."),
                      {"type": "string", "pattern": SEED_RANGE_PATTERN}]},
        "f_steps": with_default(integer("The fluid engine re-evaluates a flow's F "
                                        "each time its bytes_ratio crosses a multiple of "
                                        "1/f_steps (0: only at phase events).", 0,
                                        1_000_000), c.ExperimentConfig, "f_steps"),
    }, "", required=("jobs", "schedulers"),
        **{"if": {"required": ["jobs"], "properties": {"jobs": {"required": ["setup"]}}},
           "else": {"required": ["cluster"]}})
    del top["description"]
    return document("cluster", "mltcp cluster experiment", first_paragraph(c)
                    + " Every scheduler x network scheme x seed on the same jobs "
                    "(`mltcp cluster run FILE`).", top,
                    {"cluster": cluster, "jobs": jobs_table, "poisson": poisson})


# --------------------------------------------------------------------------- the hosts inventory


def inventory_schema() -> Schema:
    inv = inventory
    H = inv.HostSpec
    common: dict[str, Schema] = {
        "user": with_default(string("The SSH login.", pattern=anchored(inv._USER)), H, "user"),
        "port": with_default(integer("The SSH port.", 1, 65535), H, "port"),
        "key": string("The SSH private key on this machine (~ expanded, relative to the "
                      "inventory's directory): a readable file, not open to others.",
                      minLength=1),
        "python": with_default(string("The Python on the host with mltcp (and mltcp[torch]) "
                                      "installed: one path, no spaces.", pattern=r"^\S+$"),
                               H, "python"),
        "known_hosts": string("A known_hosts file on this machine holding the hosts' keys "
                              "(strict checking); omit to accept each host's key once.",
                              minLength=1),
    }
    host_props: dict[str, Schema] = {
        "name": string("The host's name, unique (a scenario's placement names it).",
                       pattern=anchored(inv._NAME)),
        "ssh": string("The address (IPv4, IPv6) or DNS name SSH reaches.", maxLength=253,
                      anyOf=[{"pattern": f"^{IPV4}$"}, {"pattern": f"^{IPV6}(?:%.+)?$"},
                             {"pattern": r"^(?!.*\.[0-9]+\.?$)(?![0-9]+\.?$)(?:"
                              + inv._DNS_LABEL.pattern + r"\.)*" + inv._DNS_LABEL.pattern
                              + r"\.?$"}]),
        "data_addr": string("The data-plane address (IPv4 or IPv6, no zone) the collective "
                            "library binds and the datapath's rules match: one a host owns "
                            "and its peers reach, unique.",
                            anyOf=[{"pattern": f"^{IPV4}$"}, {"pattern": f"^{IPV6}$"}]),
        "data_iface": string("The data-plane interface (whose congestion control MLTCP "
                             "changes), as `ip link` names it.", pattern=anchored(inv._IFACE),
                             **{"not": {"enum": [".", ".."]}}),
        "gpus": with_default(integer("The host's GPUs.", 0, 64), H, "gpus"),
        **common,
    }
    host = table(inv._HOST_KEYS, host_props, doc(H).replace(", None to", "; omit it to"),
                 title="[[hosts]]",
                 required=("name", "ssh", "data_addr", "data_iface"))
    defaults = table(inv._DEFAULT_KEYS, {k: ref(k) for k in inv._DEFAULT_KEYS},
                     "What every host shares unless it says otherwise.", title="[defaults]")
    top_keys = ("defaults", "hosts")     # parse_inventory's
    top = table(top_keys, {
        "defaults": ref("defaults"),
        "hosts": {"type": "array", "description": "The training hosts ([[hosts]]).",
                  "minItems": 1, "items": ref("host")},
    }, "", required=("hosts",))
    del top["description"]
    for key in inv._DEFAULT_KEYS:      # one schema for a key of [defaults] and of a host
        host["properties"][key] = ref(key)
    return document("inventory", "mltcp hosts inventory", first_paragraph(inv)
                    + " Read by `mltcp run|compare SCENARIO --backend hosts --inventory "
                    "FILE`.", top,
                    {"defaults": defaults, "host": host, **common})


# --------------------------------------------------------------------------- the jobs file


def jobs_schema() -> Schema:
    J = jobs.JobSpec
    module_names = [*datapath.MODULES, *(f"mltcp_{m}" for m in datapath.MODULES)]
    module = {"type": "string", "pattern": "^\\s*(?:" + "|".join(
        any_case(m, dashes=False) for m in [*module_names, "all"]) + ")\\s*$"}
    port = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 65535},
                      {"type": "string", "pattern": r"^\s*\+?[0-9][0-9_]*\s*"
                       r"(?:-\s*\+?[0-9][0-9_]*\s*)?$"}]}
    dst = {"type": "string", "pattern": r"\S"}

    def one_or_list(item: Schema, description: str) -> Schema:
        return {"description": description,
                "anyOf": [item, {"type": "array", "items": item}]}

    collectives = [c.value for c in Collective]
    ps = Collective.PARAMETER_SERVER.value
    job_props: dict[str, Schema] = {
        "name": string("The job's name (`mltcp job attach NAME`), unique in the file.",
                       pattern=validate.JOB_NAME.pattern),
        "cc": with_default(choice("The congestion control (its MLTCP module).", module_names),
                           J, "cc"),
        "budget": size("Bytes this host sends per iteration (or gradient_bytes with workers, "
                       "or learn).", 1, aggressiveness.MAX_BUDGET_BYTES),
        "gradient_bytes": size("The model's gradient size G: the budget follows from the "
                               "collective and workers.", 1, aggressiveness.MAX_BUDGET_BYTES),
        "workers": integer(f"Workers of the job (with gradient_bytes; at least 2 but for "
                           f"{ps}).", 1),
        "collective": {"type": "string", "description": "The collective (with "
                       "gradient_bytes): " + ", ".join(collectives) + ".",
                       "default": Collective.RING_ALLREDUCE.value,
                       "anyOf": [{"enum": collectives},
                                 {"pattern": "^\\s*(?:" + "|".join(
                                     any_case(c) for c in collectives) + ")\\s*$"}]},
        "role": {"type": "string", "description": "parameter_server: this host's role.",
                 "default": "worker", "anyOf": [{"enum": list(ROLES)}, {
                     "pattern": "^\\s*(?:" + "|".join(any_case(r) for r in ROLES)
                     + ")\\s*$"}]},
        "servers": integer("parameter_server: how many servers.", 1),
        "learn": with_default(boolean("Learn the budget from the first iterations instead."),
                              J, "learn"),
        "preset": choice("F's parameters by name (slope, intercept, cap override them).",
                         aggressiveness.PRESETS),
        "slope": number("F's slope: F = intercept + slope x bytes_ratio.", 0,
                        aggressiveness.MAX_SLOPE),
        "intercept": number(f"F's intercept (at least 1/{aggressiveness.FP_ONE}).", 0,
                            aggressiveness.MAX_INTERCEPT, lo_open=True),
        "cap": number("F's cap (at least the intercept).", 0, aggressiveness.MAX_CAP,
                      lo_open=True),
        "gap_ms": with_default(number("The idle gap that starts a new iteration, ms: "
                                      "longer than ACK gaps within communication, shorter "
                                      "than the compute phase.", 0.05, 60_000), J, "gap_ms"),
        "stale_s": {"description": "Fall back to the standard congestion control when "
                    "the job is not refreshed for this long, s (0: never).",
                    "default": field_default(J, "stale_s"),
                    "anyOf": [{"type": "number", "const": 0},
                              {"type": "number", "minimum": 1, "maximum": 86_400}]},
        "cgroup": string("The cgroup (v2) the training processes run in, absolute or "
                         "relative to the cgroup mount."),
        "whole_host": with_default(boolean("The root cgroup is meant: every socket of the "
                                           "host."), J, "whole_host"),
        "signal": with_default(boolean("The training loop signals iteration ends "
                                       "(mltcp.hook): boundaries from the signal, never "
                                       "from idle gaps."), J, "signal"),
        "dst": one_or_list(ref("dst"), "Remote rules: ADDR[/LEN][:PORT[-PORT]] (IPv6 as "
                           "[IPV6[/LEN]]:PORT[-PORT]), each one rule (prefix AND ports)."),
        "port": one_or_list(ref("port"), "Remote port rules: a port or a range \"LO-HI\"."),
        "local_port": one_or_list(ref("port"), "Local port rules: a port or a range \"LO-HI\"."),
    }
    job = table(jobfile.JOB_KEYS, job_props, "One job, as `mltcp job attach`'s flags "
                "(gradient_bytes for --gradient-bytes). Its sockets are found by cgroup "
                "and/or rules; its rules are alternatives.", title="[[job]]",
                required=("name",),
                oneOf=[{"required": ["budget"]}, {"required": ["gradient_bytes"]},
                       {"required": ["learn"], "properties": {"learn": {"const": True}}}],
                anyOf=[{"required": [k]} for k in ("cgroup", "dst", "port", "local_port")],
                allOf=[{"if": {"required": ["gradient_bytes"]},
                        "then": {"required": ["workers"]}},
                       {"if": {"required": ["collective"], "properties": {"collective": {
                           "pattern": "^\\s*" + any_case(ps) + "\\s*$"}}},
                        "else": {"properties": {"workers": {"minimum": 2}}}}])
    top = table(jobfile.FILE_KEYS, {
        "modules": {"description": "Congestion-control modules to load (the jobs' are loaded "
                    "anyway): names of " + ", ".join(datapath.MODULES) + ", or all.",
                    "anyOf": [ref("module"), {"type": "array", "items": ref("module")}]},
        "job": {"type": "array", "description": "The jobs ([[job]]), names unique.",
                "items": ref("job")},
    }, "")
    del top["description"]
    return document("jobs", "mltcp jobs file", first_paragraph(jobfile)
                    + f" Read by `mltcp apply FILE` and `mltcp agent --config FILE`; by "
                    f"convention {jobfile.DEFAULT_FILE}.", top,
                    {"job": job, "module": module, "dst": dst, "port": port})


SCHEMAS = {"scenario": scenario_schema, "cluster": cluster_schema,
           "inventory": inventory_schema, "jobs": jobs_schema}


def path_of(name: str) -> Path:
    return OUT / f"{name}.schema.json"


def render(name: str) -> str:
    return json.dumps(SCHEMAS[name](), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if a shipped schema differs from this script's")
    args = ap.parse_args(argv)
    stale = []
    for name in SCHEMAS:
        text, path = render(name), path_of(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(REPO)))
            continue
        OUT.mkdir(exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)} ({len(text.encode())} bytes)")
    if stale:
        print(f"stale: {', '.join(stale)}; run scripts/schemas.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A scenario job's ``workload = {...}`` table is checked when the scenario is read, by the
workload's own rules (issue 25): "a value one validator accepts, no later stage refuses".

Before, the scenario had rules of its own (a name pattern, 1..10^6 for every size) and
the workload's (``python -m mltcp.workloads.ddp``: known models, each size's range,
heads dividing the width) ran only on the hosts, after SSH, the agent, the cgroups and
torchrun.  Now the scenario builds the very command line the hosts backend runs
(:meth:`Workload.argv`) and parses it with :func:`mltcp.core.workload.parse`, one set of
rules, its refusals named as the table's fields.  Checked here: the refusals and their
fields, that acceptance agrees with the workload's parser on a grid of tables, that the
hosts backend's worker command carries exactly that command line, that every backend
(``--backend fluid`` too) refuses such a file, and the memory bound of a model.
"""

from __future__ import annotations

import copy
import itertools
import os
import shlex
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from mltcp.core import workload as rules
from mltcp.core.errors import SpecError
from mltcp.lab.scenario.spec import Workload, parse_scenario

REPO = Path(__file__).resolve().parents[1]


def _scenario(workload: object, **job: object) -> dict[str, Any]:
    text = resources.files("mltcp.lab.scenario").joinpath(
        "examples", "compatible-pair.toml").read_text()
    data = tomllib.loads(text)
    data["jobs"][0]["workload"] = copy.deepcopy(workload)
    data["jobs"][0].update(job)
    return data


def _refusal(workload: object, **job: object) -> SpecError:
    with pytest.raises(SpecError) as err:
        parse_scenario(_scenario(workload, **job))
    assert "\n" not in str(err.value)
    return err.value


@pytest.mark.parametrize(("workload", "field", "words"), [
    ({"model": "nosuch"}, "model", "unknown value 'nosuch'; use one of: resnet18"),
    ({"model": "Resnet18"}, "model", "unknown value 'Resnet18'"),
    ({"model": "resnet"}, "model", "unknown value"),
    ({"model": "transformer", "heads": 5}, "heads", "5 does not divide the width 256"),
    ({"model": "transformer", "preset": "tiny", "heads": 3}, "heads", "the width 64"),
    ({"model": "transformer", "d_model": 100, "heads": 8}, "heads", "e.g. 10"),
    ({"model": "transformer", "d_model": 7}, "d_model", "between 8 and 16384"),
    ({"model": "transformer", "d_model": 20000}, "d_model", "between 8 and 16384"),
    ({"model": "transformer", "vocab": 1}, "vocab", "between 2 and 1000000"),
    ({"model": "transformer", "seq": 1}, "seq", "between 2 and 65536"),
    ({"model": "transformer", "seq": 100000}, "seq", "between 2 and 65536"),
    ({"model": "transformer", "layers": 0}, "layers", "between 1 and 256"),
    ({"model": "transformer", "layers": 300}, "layers", "between 1 and 256"),
    ({"model": "transformer", "heads": 300}, "heads", "between 1 and 256"),
    ({"model": "resnet18", "image_size": 16}, "image_size", "between 32 and 1024"),
    ({"model": "resnet18", "image_size": 2000}, "image_size", "between 32 and 1024"),
    ({"model": "resnet18", "batch": 0}, "batch", "between 1 and 65536"),
    ({"model": "resnet18", "batch": 70000}, "batch", "between 1 and 65536"),
    ({"model": "resnet18", "batch": "8"}, "batch", "must be an integer"),
    ({"model": "resnet18", "batch": True}, "batch", "must be an integer"),
    ({"model": "resnet18", "gpu_time_ms": 700000}, "gpu_time_ms", "<= 600000"),
    ({"model": "resnet18", "gpu_time_ms": -1}, "gpu_time_ms", ">= 0"),
    ({"model": "resnet18", "gpu_time_ms": float("inf")}, "gpu_time_ms", "finite"),
    ({"model": "resnet18", "d_model": 64}, "d_model", "only the transformer"),
    ({"model": "resnet18", "preset": "base"}, "preset", "does not apply to model resnet18"),
    ({"model": "transformer", "image_size": 64}, "image_size", "only a CNN"),
    ({"model": "transformer", "preset": "large"}, "preset", "unknown value 'large'"),
    ({"model": "transformer", "preset": 1}, "preset", "must be a string"),
    ({"model": "resnet18", "backend": "auto"}, "backend", "use one of: gloo, nccl"),
    ({"model": 5}, "model", "must be a string"),
])
def test_a_table_the_workload_refuses_is_refused_naming_its_field(
        workload: dict, field: str, words: str) -> None:
    err = _refusal(workload)
    assert err.field == f"jobs[0].workload.{field}", str(err)
    assert words in str(err), str(err)
    assert "--" not in str(err), f"a flag where the table has a key: {err}"


def test_the_fix_is_written_as_the_table_writes_it() -> None:
    err = _refusal({"model": "transformer", "preset": "base", "batch": 65536})
    assert err.field == "jobs[0].workload.batch"
    assert "over 1 TiB" in err.problem and err.fix.startswith("give at most batch = ")


@pytest.mark.parametrize("workload", [
    {"model": "transformer", "d_model": 16384, "layers": 256, "vocab": 1_000_000},
    {"model": "transformer", "preset": "base", "batch": 65536},
    {"model": "vgg19", "image_size": 1024, "batch": 65536},
    {"model": "resnet152", "image_size": 1024, "batch": 4096},
])
def test_a_model_no_rank_can_hold_is_refused(workload: dict) -> None:
    """In range flag by flag, out of any host's memory together: DDP keeps the whole
    model and a batch's activations on every rank."""
    err = _refusal(workload)
    assert "per rank" in err.problem and "over 1 TiB" in err.problem, str(err)


@pytest.mark.parametrize("workload", [
    {"model": "resnet18"},
    {"model": "resnet50", "batch": 64, "image_size": 224, "backend": "nccl"},
    {"model": "vgg16", "batch": 32, "image_size": 224},
    {"model": "transformer", "preset": "base", "batch": 16},
    {"model": "transformer", "d_model": 100},
    {"model": "transformer", "preset": "tiny", "gpu_time_ms": 600000.0, "signal": True},
])
def test_a_table_the_workload_runs_is_taken(workload: dict) -> None:
    job = parse_scenario(_scenario(workload)).jobs[0]
    assert job.workload is not None and job.workload.model == workload["model"]


SIZES = {"d_model": (7, 8, 64, 100, 16384, 16385), "heads": (1, 3, 4, 256, 257),
         "seq": (1, 2, 65536, 65537), "image_size": (31, 32, 1024, 1025)}


def _agrees(table: dict) -> None:
    """The scenario takes the table exactly when the workload takes its command line."""
    sizes = tuple((k, v) for k, v in table.items() if k != "model")
    try:
        rules.parse(Workload(table["model"], size=sizes).argv(20), environ={})
        workload_says = None
    except SpecError as err:
        workload_says = err.field.removeprefix("--").replace("-", "_")
    try:
        parse_scenario(_scenario(table))
        scenario_says = None
    except SpecError as err:
        scenario_says = err.field.rpartition(".")[2]
    assert scenario_says == workload_says, (table, scenario_says, workload_says)


@pytest.mark.parametrize("model", ["transformer", "resnet18"])
def test_the_scenario_and_the_workload_agree_on_every_table(model: str) -> None:
    """A grid around every bound: never one accepting what the other refuses."""
    keys = ("d_model", "heads", "seq") if model == "transformer" else ("image_size",)
    for values in itertools.product(*(SIZES[k] for k in keys)):
        _agrees({"model": model, **dict(zip(keys, values, strict=True))})


def test_the_hosts_run_the_command_line_the_scenario_checked(tmp_path: Path) -> None:
    """The worker's torchrun command carries Workload.argv: what was checked is what
    runs (and the workload's parser takes it)."""
    from mltcp.lab.scenario.hosts.inventory import parse_inventory
    from mltcp.lab.scenario.hosts.training import HostRun, JobOnHosts
    from mltcp.lab.scenario.plan import resolve

    table = {"model": "transformer", "preset": "tiny", "heads": 4, "gpu_time_ms": 12.5}
    scenario = parse_scenario(_scenario(table))
    plan = resolve(scenario, scenario.schemes[0], 7)
    hosts = [{"name": f"g{i}", "ssh": f"10.0.0.{i}", "data_addr": f"10.1.0.{i}",
              "data_iface": "eth1"} for i in range(1, 5)]
    inventory = parse_inventory({"hosts": hosts})
    run = HostRun(plan, inventory, tmp_path)
    run._kernel_of = {h.name: h.name for h in inventory.hosts}
    run.cgroup_roots = {h.name: "/sys/fs/cgroup" for h in inventory.hosts}
    job = plan.jobs[0]
    on = JobOnHosts(job, tuple(run.host_of(h) for h in job.hosts), "a", "mltcp-x/a", "/tmp/a")
    script = run.worker_argv(on, 0, on.hosts[0], 1e9)[2]
    torchrun = shlex.split(script.rpartition(" exec env ")[2])
    argv = torchrun[torchrun.index("mltcp.workloads.ddp") + 1:]
    assert argv == job.spec.workload.argv(job.spec.iterations, 7)
    assert rules.parse(argv, environ={}).model.size.heads == 4


def test_the_fluid_backend_refuses_such_a_file_too(tmp_path: Path) -> None:
    """The same scenario on every backend: the fluid model ignores workloads, and yet a
    file the hosts would refuse is refused there (before, it ran: exit 0)."""
    text = resources.files("mltcp.lab.scenario").joinpath(
        "examples", "compatible-pair.toml").read_text()
    path = tmp_path / "s.toml"
    path.write_text(text.replace("iterations = 40", 'iterations = 40\nworkload = '
                                 '{model = "transformer", heads = 5}', 1))
    proc = subprocess.run([sys.executable, "-m", "mltcp.cli", "run", str(path), "--backend",
                           "fluid", "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"mltcp: error: jobs[0].workload.heads: 5 does not divide the width 256 (in {path}); "
        "give a number of heads that divides d_model, e.g. 4"]
    assert not (tmp_path / "out" / "traces").exists()


def test_the_shell_does_not_change_what_the_scenario_accepts(monkeypatch) -> None:
    """The workload reads MLTCP_START_AT and WORLD_SIZE; the scenario's check must not."""
    monkeypatch.setenv("MLTCP_START_AT", "soon")
    monkeypatch.setenv("WORLD_SIZE", "abc")
    assert parse_scenario(_scenario({"model": "resnet18"})).jobs[0].workload is not None


def test_a_seed_the_scenario_takes_the_workload_takes() -> None:
    """The hosts pass the run's seed to --seed: its range is the scenario's."""
    from mltcp.core import validate

    assert rules.parse(["--model", "resnet18", "--seed", str(validate.MAX_SEED)],
                       environ={}).seed == validate.MAX_SEED
    with pytest.raises(SpecError, match=r"^--seed: must be between 0 and 4294967295"):
        rules.parse(["--model", "resnet18", "--seed", str(validate.MAX_SEED + 1)], environ={})

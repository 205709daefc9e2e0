"""The bundled DDP workload (mltcp.workloads): its flags, its transport rules, and real
runs under torchrun (two ranks, gloo over loopback) of a CNN and the transformer whose
hook records are checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mltcp import hook
from mltcp.core.errors import CapabilityError, SpecError
from mltcp.workloads import spec, transport
from tests.hook_agent import Agent, short_tmp
from tests.interrupt import ctrl_c_group_when_ready

TORCH_REASON = "needs PyTorch: pip install 'mltcp[torch]'"


# --------------------------------------------------------------------------- flags


def test_defaults_and_a_preset_with_an_override() -> None:
    run = spec.parse(["--model", "transformer", "--preset", "tiny", "--layers", "3"])
    assert run.model.size == spec.TransformerSize(d_model=64, layers=3, heads=2, seq=32,
                                                  vocab=1000)
    assert (run.iterations, run.seed, run.backend, run.gpu_time_ms, run.signal) == \
        (100, 0, "auto", 0.0, None)
    cnn = spec.parse(["--model", "vgg11", "--image-size", "64", "--gpu-time-ms", "120",
                      "--signal", "--job", "vgg"])
    assert (cnn.model.image_size, cnn.gpu_time_ms, cnn.signal, cnn.job) == (64, 120, True, "vgg")


@pytest.mark.parametrize(("argv", "match"), [
    (["--batch", "0"], r"^--batch: must be between 1 and 65536 \(got 0\)"),
    (["--iterations", "0"], r"^--iterations: must be between 1 and"),
    (["--gpu-time-ms", "-5"], r"^--gpu-time-ms: must be >= 0"),
    (["--gpu-time-ms", "nan"], r"^--gpu-time-ms: must be >= 0 and <= 600000 \(got nan\)"),
    (["--bucket-cap-mb", "0"], r"^--bucket-cap-mb: must be > 0"),
    (["--d-model", "64"], r"^--d-model: does not apply to --model resnet18; drop it"),
    (["--workers", "4"], r"^--workers: only --describe takes it"),
    (["--job", "a b"], r"^--job: 'a b' is not a valid name"),
    (["--image-size", "8"], r"^--image-size: must be between 32 and 1024"),
])
def test_a_bad_flag_is_one_line_naming_it(argv: list[str], match: str) -> None:
    with pytest.raises(SpecError, match=match) as err:
        spec.parse(["--model", "resnet18", *argv])
    assert "\n" not in str(err.value)


def test_heads_must_divide_the_width() -> None:
    with pytest.raises(SpecError, match=r"^--heads: 3 does not divide the width 64; give a "
                       r"number of heads that divides --d-model, e.g. 2$"):
        spec.parse(["--model", "transformer", "--d-model", "64", "--heads", "3"])


def test_a_bad_start_time_in_the_environment_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("MLTCP_START_AT", "soon")
    with pytest.raises(SpecError, match=r"^MLTCP_START_AT: 'soon' is not a time"):
        spec.parse(["--model", "resnet18"])
    monkeypatch.setenv("MLTCP_START_AT", "1700000000.5")
    assert spec.parse(["--model", "resnet18"]).start_at == 1700000000.5


def test_the_command_refuses_on_one_line(capsys) -> None:
    from mltcp.workloads import ddp

    with pytest.raises(SystemExit) as exit_:
        ddp.main(["--model", "resnet18", "--batch", "x"])
    assert exit_.value.code == 2
    assert ddp.main(["--model", "resnet99"]) == 2
    assert ddp.main(["--model", "resnet18", "--batch", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and err[0].startswith("python -m mltcp.workloads.ddp: error: "
                                               "argument --batch: invalid int value: 'x'")
    assert err[1].startswith("python -m mltcp.workloads.ddp: error: --model: unknown value "
                             "'resnet99'; use one of: resnet18, ")
    assert err[2].startswith("python -m mltcp.workloads.ddp: error: --batch: ")


def test_a_model_too_large_for_the_gpu_is_one_line_naming_batch_and_model(
        monkeypatch, capsys) -> None:
    """The scenario cannot know a host's GPU; PyTorch's out-of-memory error there ends
    the rank in one line (exit 3, a limit of the host) that says what to make smaller.
    The error is PyTorch's own class with its own message, raised where training would
    raise it (this machine has no GPU to fill)."""
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    from mltcp.workloads import ddp

    said = ("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
            "79.19 GiB of which 3.21 GiB is free. Including non-PyTorch memory, this process "
            "has 75.97 GiB memory in use.")

    def train(run: spec.RunSpec) -> int:
        raise torch.OutOfMemoryError(said)

    monkeypatch.setattr(ddp, "train", train)
    assert ddp.main(["--model", "transformer", "--batch", "512", "--d-model", "4096"]) == 3
    assert ddp.main(["--model", "resnet50", "--batch", "4096"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "python -m mltcp.workloads.ddp: error: --model transformer with --batch 512 does not "
        "fit this GPU's memory (PyTorch: CUDA out of memory. Tried to allocate 20.00 GiB. GPU "
        "0 has a total capacity of 79.19 GiB of which 3.21 GiB is free); give a smaller "
        "--batch or model (--d-model 4096, --layers 4)",
        "python -m mltcp.workloads.ddp: error: --model resnet50 with --batch 4096 does not "
        "fit this GPU's memory (PyTorch: CUDA out of memory. Tried to allocate 20.00 GiB. GPU "
        "0 has a total capacity of 79.19 GiB of which 3.21 GiB is free); give a smaller "
        "--batch or model (--image-size 32)"]

    def other(run: spec.RunSpec) -> int:
        raise RuntimeError("something else")

    monkeypatch.setattr(ddp, "train", other)
    with pytest.raises(RuntimeError, match="something else"):     # not taken for memory
        ddp.main(["--model", "resnet50"])


# --------------------------------------------------------------------------- transport


def test_gloo_on_cpu_hosts_and_nccl_over_tcp_on_gpu_hosts() -> None:
    env: dict[str, str] = {}
    assert transport.choose("auto", cuda=False, environ=env).backend == "gloo"
    assert env == {}
    nccl = transport.choose("auto", cuda=True, environ=env)
    assert nccl.backend == "nccl" and env == {"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}
    assert "NCCL over TCP sockets" in nccl.description
    with pytest.raises(CapabilityError, match="no CUDA GPU"):
        transport.choose("nccl", cuda=False, environ={})
    with pytest.raises(SpecError, match=r"^NCCL_IB_DISABLE: is '0': NCCL would use RDMA"):
        transport.choose("nccl", cuda=True, environ={"NCCL_IB_DISABLE": "0"})
    with pytest.raises(SpecError, match=r"^NCCL_NET: is 'IB'"):
        transport.choose("nccl", cuda=True, environ={"NCCL_NET": "IB"})


# --------------------------------------------------------------------------- PyTorch


def test_describe_gives_the_gradient_bytes_and_the_per_host_budget(capsys) -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    from mltcp.workloads import ddp, models

    assert ddp.main(["--model", "transformer", "--preset", "tiny", "--describe",
                     "--workers", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    model = models.build(spec.parse(["--model", "transformer", "--preset", "tiny"]).model)
    grad = sum(p.numel() * 4 for p in model.parameters())
    assert (out["gradient_bytes"], out["bytes_per_host_per_iteration"]) == (grad,
                                                                            -(-2 * 3 * grad // 4))


def test_synthetic_data_come_from_the_seed_and_the_rank() -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    from mltcp.workloads import models

    s = spec.parse(["--model", "resnet18", "--batch", "2"]).model
    cpu = torch.device("cpu")
    a, b = models.synthetic_batches(s, 7, 0, cpu), models.synthetic_batches(s, 7, 0, cpu)
    other = models.synthetic_batches(s, 7, 1, cpu)
    assert len(a) == models.DATA_BATCHES
    assert all(torch.equal(x, y) for pa, pb in zip(a, b, strict=True)
               for x, y in zip(pa, pb, strict=True))
    assert not torch.equal(a[0][0], other[0][0])


def _torchrun(out: Path, *argv: str, env: dict[str, str] | None = None,
              launcher: str = "torch.distributed.run") -> str:
    """The workload on two ranks of one host (torchrun --standalone picks the port)."""
    proc = subprocess.run(
        [sys.executable, "-m", launcher, "--standalone", "--nproc-per-node",
         "2", "-m", "mltcp.workloads.ddp", "--iterations", "3", "--log-every", "1",
         "--hook-out", str(out), *argv],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "GLOO_SOCKET_IFNAME": "lo", **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _check_records(out: Path, model_argv: list[str], job: str | None) -> list:
    from mltcp.workloads import ddp

    grad = ddp.describe(spec.parse([*model_argv, "--describe"]))["gradient_bytes"]
    records = hook.read_records(out)
    assert [(r.rank, r.iteration) for r in records] == [(k, i) for k in (0, 1) for i in range(3)]
    for r in records:
        assert (r.job, r.world_size, r.bytes) == (job, 2, grad)
        assert r.buckets >= 1 and r.start <= r.comm_start <= r.comm_end <= r.end
    return records


def test_a_cnn_trains_on_two_ranks_with_the_compute_pad(tmp_path: Path) -> None:
    pytest.importorskip("torchvision", reason=TORCH_REASON)
    model = ["--model", "resnet18", "--batch", "2"]
    stdout = _torchrun(tmp_path, *model, "--gpu-time-ms", "30", "--job", "cnn")
    records = _check_records(tmp_path, model, "cnn")
    assert all(r.comm_start - r.start >= 0.030 for r in records)   # the pad precedes comm
    lines = stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines if ln.startswith("iteration ")] == \
        ["iteration 1/3", "iteration 2/3", "iteration 3/3"]          # rank 0 only
    assert "transport: gloo over TCP on lo" in lines
    assert any(ln.startswith("compute pad ON: each iteration sleeps 30 ms") for ln in lines)


def test_the_transformer_trains_on_two_ranks_and_signals_each_iteration(
        tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    model = ["--model", "transformer", "--preset", "tiny", "--batch", "2"]
    # The hosts backend's start: a latest moment, and a go file it writes once every
    # job is ready; here it is there from the first, with a moment already past, so the
    # ranks start as soon as they are ready, together, long before the latest moment.
    start_at, go = time.time() + 300, time.time()
    go_file = tmp_path / "start-go"
    go_file.write_text(f"{go!r}\n")
    with short_tmp() as d, Agent(os.path.join(d, "agent.sock")).serving() as agent:
        stdout = _torchrun(tmp_path, *model, env={
            "MLTCP_JOB": "lm", "MLTCP_HOOK_SIGNAL": "1", "MLTCP_AGENT_SOCKET": agent.path,
            "MLTCP_START_AT": str(start_at), "MLTCP_START_GO": str(go_file)})
    records = _check_records(tmp_path, model, "lm")
    from mltcp.lab.scenario.hosts.start import ready_at
    ready = ready_at(stdout)        # the line the hosts backend reads
    assert ready is not None and "the first iteration waits for the go file" in stdout
    assert f"start: go at {go:.6f}, " in stdout
    # Every rank's first iteration came at once (rank 1 may pass the barrier, read the
    # file and start before rank 0 has printed its ready line), not at the latest start.
    assert all(go <= r.start_wall < start_at - 240 for r in records)
    # rank 0 started after its ready line (printed to the millisecond: rounded up, it
    # can stand up to 0.5 ms after a start that followed it at once)
    assert all(ready - 0.0005 <= r.start_wall for r in records if r.rank == 0)
    assert all(r.signal_seq is not None and r.signal_failures == 0 for r in records)
    assert sorted((m["iteration"], m["job"], m["op"]) for _, m in agent.received) == sorted(
        (r.iteration, "lm", "signal") for r in records)
    assert "compute pad" not in stdout and "end-of-iteration signal for job lm" in stdout


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_under_the_projects_torchrun_is_one_line_per_process(tmp_path: Path) -> None:
    """A terminal's Ctrl-C (SIGINT to the process group) mid-training under
    ``python -m mltcp.workloads.torchrun``: each rank's line, then the launcher's, and
    130; plain torchrun printed its SignalException's traceback and exited 1."""
    pytest.importorskip("torch", reason=TORCH_REASON)
    code, err = ctrl_c_group_when_ready(
        [sys.executable, "-m", "mltcp.workloads.torchrun", "--standalone", "--nproc-per-node",
         "2", "-m", "mltcp.workloads.ddp", "--model", "transformer", "--preset", "tiny",
         "--iterations", "1000000", "--log-every", "1", "--hook-out", str(tmp_path)],
        "iteration 2/",
        # OMP_NUM_THREADS set (as the hosts backend does): torchrun warns at start otherwise
        {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"})
    assert code == 130, err
    assert err.splitlines() == ["python -m mltcp.workloads.ddp: interrupted (SIGINT)"] * 2 + [
        "python -m mltcp.workloads.torchrun: interrupted (SIGINT)"], err
    assert sorted(p.name for p in tmp_path.glob("hook-rank*.jsonl")) == [
        "hook-rank0.jsonl", "hook-rank1.jsonl"]               # each rank closed its records


def test_the_projects_torchrun_passes_its_exit_and_flags_through(tmp_path: Path) -> None:
    """Without a signal it is torchrun: the ranks run, and a bad flag is torchrun's."""
    pytest.importorskip("torch", reason=TORCH_REASON)
    from mltcp.workloads import torchrun

    with pytest.raises(SystemExit) as bad:
        torchrun.main(["--nproc-per-node"])
    assert bad.value.code == 2
    stdout = _torchrun(tmp_path, "--model", "transformer", "--preset", "tiny", "--batch", "2",
                       launcher="mltcp.workloads.torchrun")
    assert "iteration 3/3" in stdout

"""The training-loop hook (mltcp.hook): records, environment, bad input, the agent signal,
and real PyTorch DDP/FSDP runs (gloo over loopback, two processes) where torch is
installed.

The signal client talks to a real Unix-socket server run by the test on threads (the
agent's side of the protocol); the DDP workers signal it from their processes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mltcp import hook
from mltcp.core.errors import SpecError
from mltcp.hook.iteration import now
from tests.hook_agent import Agent, short_tmp

TORCH_REASON = "needs PyTorch: pip install 'mltcp[torch]'"


def _loop(h: hook.IterationHook, n: int, *, nbytes: int = 1000, comm: bool = True) -> None:
    for i in range(n):
        with h.iteration():
            time.sleep(0.001)
            if comm:
                h.comm_begin()
                h.add_bytes(nbytes + i)
                time.sleep(0.001)
                h.comm_end()
            time.sleep(0.001)


def _ordered(r: hook.IterationHookRecord) -> bool:
    return (r.start <= r.comm_start <= r.comm_end <= r.end
            and r.start_wall <= r.comm_start_wall <= r.comm_end_wall <= r.end_wall)


# --------------------------------------------------------------------------- plain loops


def test_a_plain_loop_writes_one_ordered_record_per_iteration(tmp_path: Path) -> None:
    with hook.IterationHook(tmp_path, job="resnet", rank=1, world_size=2) as h:
        _loop(h, 5)
        assert h.stats() == hook.HookStats(5, 0, 0, 0)
    records = hook.read_records(tmp_path / "hook-rank1.jsonl")
    assert [r.iteration for r in records] == [0, 1, 2, 3, 4]
    assert [r.bytes for r in records] == [1000, 1001, 1002, 1003, 1004]
    assert records[-1] == h.last
    for r in records:
        assert _ordered(r) and r.comm_start - r.start >= 0.001 and r.end - r.comm_end >= 0.001
        assert abs(r.start_wall - time.time()) < 60
        assert (r.job, r.rank, r.world_size, r.buckets, r.pid) == ("resnet", 1, 2, 0, os.getpid())
        assert (r.signal_seq, r.signal_error, r.signal_failures) == (None, None, 0)
    assert all(a.end <= b.start for a, b in zip(records, records[1:], strict=False))
    line = json.loads((tmp_path / "hook-rank1.jsonl").read_text().splitlines()[0])
    assert line["schema"] == hook.SCHEMA and line["iteration"] == 0


def test_an_iteration_without_communication_records_none_for_it(tmp_path: Path) -> None:
    with hook.IterationHook(tmp_path / "r.jsonl") as h:
        _loop(h, 2, comm=False)
    for r in hook.read_records(tmp_path / "r.jsonl"):
        assert r.comm_start is r.comm_end is r.comm_start_wall is None and r.bytes == 0


def test_several_communication_phases_span_the_first_begin_to_the_last_end() -> None:
    h = hook.IterationHook()
    with h.iteration():
        h.comm_begin()
        first = now()
        h.comm_end(last=False)
        time.sleep(0.002)
        h.comm_begin()
        h.comm_end()
    r = h.last
    assert r.comm_start <= first and r.comm_end - r.comm_start >= 0.002


def test_a_step_that_raises_leaves_no_record_and_the_next_one_goes_on(tmp_path: Path) -> None:
    with hook.IterationHook(tmp_path) as h:
        with pytest.raises(ZeroDivisionError), h.iteration():
            1 / 0  # noqa: B018
        _loop(h, 1)
    assert [r.iteration for r in hook.read_records(tmp_path)] == [0]


def test_records_survive_a_cut_short_last_line_and_read_by_directory(tmp_path: Path) -> None:
    for rank in (10, 2):
        with hook.IterationHook(tmp_path, rank=rank, world_size=11) as h:
            _loop(h, 2)
    with (tmp_path / "hook-rank10.jsonl").open("a") as f:
        f.write('{"schema": "mltcp.hook/1", "job": nu')        # a crash mid-line
    records = hook.read_records(tmp_path)
    assert [(r.rank, r.iteration) for r in records] == [(2, 0), (2, 1), (10, 0), (10, 1)]


@pytest.mark.parametrize(("edit", "match"), [
    (lambda lines: lines.insert(1, "not json"), r"^hook-rank0.jsonl:2: is not a JSON line"),
    (lambda lines: lines.__setitem__(0, lines[0].replace('"bytes":1000', '"bytes":-1')),
     r"^hook-rank0.jsonl:1.bytes: must be >= 0"),
    (lambda lines: lines.__setitem__(0, lines[0].replace('"buckets"', '"bukets"')),
     r"^hook-rank0.jsonl:1.bukets: unknown key; did you mean 'buckets'"),
    (lambda lines: lines.__setitem__(0, lines[0].replace("mltcp.hook/1", "mltcp.hook/0")),
     r"^hook-rank0.jsonl:1.schema: is 'mltcp.hook/0'"),
])
def test_a_damaged_record_file_is_one_line_naming_the_line(tmp_path: Path, edit, match) -> None:
    with hook.IterationHook(tmp_path) as h:
        _loop(h, 2)
    path = tmp_path / "hook-rank0.jsonl"
    lines = path.read_text().splitlines()
    edit(lines)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match=match) as err:
        hook.read_records(path)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- environment


def test_from_env_activates_the_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLTCP_HOOK_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("MLTCP_JOB", "bert")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("MLTCP_HOOK_SIGNAL", "0")
    with hook.from_env() as h:
        _loop(h, 3)
    [r] = {(r.job, r.rank, r.world_size) for r in hook.read_records(tmp_path / "out")}
    assert r == ("bert", 3, 4) and h.path == tmp_path / "out" / "hook-rank3.jsonl"
    # an argument wins over its variable; a .jsonl name takes the rank
    with hook.from_env(out=tmp_path / "run-{rank}.jsonl", job="gpt") as h:
        _loop(h, 1)
    assert hook.read_records(tmp_path / "run-3.jsonl")[0].job == "gpt"


def test_without_the_environment_the_hook_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MLTCP_HOOK_OUT", "MLTCP_JOB", "MLTCP_HOOK_SIGNAL", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with hook.from_env() as h:
        _loop(h, 2)
    assert h.path is None and (h.rank, h.world_size, h.last.iteration, h.last.job) == (0, 1, 1,
                                                                                      None)


@pytest.mark.parametrize(("env", "match"), [
    ({"MLTCP_HOOK_SIGNAL": "maybe"}, r"^MLTCP_HOOK_SIGNAL: 'maybe' is not a flag; set "),
    ({"RANK": "x"}, r"^RANK: 'x' is not an integer; the launcher"),
    ({"RANK": "-1"}, r"^RANK: must be >= 0"),
    ({"RANK": "4", "WORLD_SIZE": "4"}, r"^rank: 4 is not below world_size 4"),
    ({"MLTCP_HOOK_SIGNAL": "1"}, r"^job: is needed to signal"),
    ({"MLTCP_JOB": "bad name"}, r"^job: 'bad name' is not a valid name; use 1-32 letters"),
    ({"MLTCP_HOOK_OUT": "{tmp}/one.jsonl", "WORLD_SIZE": "2"},
     r"^out: '.*one.jsonl' is one file for 2 ranks; give a directory"),
    ({"MLTCP_HOOK_OUT": "{tmp}/afile/x"}, r"^out: cannot write '.*' \(Not a directory\)"),
])
def test_bad_environment_is_one_line_naming_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict, match: str) -> None:
    (tmp_path / "afile").write_text("a file, not a directory")
    for name in ("MLTCP_HOOK_OUT", "MLTCP_JOB", "MLTCP_HOOK_SIGNAL", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    with pytest.raises(SpecError, match=match) as err:
        hook.from_env()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("call", "match"), [
    (lambda h: h.comm_begin(), r"^comm_begin\(\): no iteration is open; call it inside"),
    (lambda h: h.end(), r"^end\(\): no iteration is open"),
    (lambda h: (h.begin(), h.begin()), r"^begin\(\): iteration 0 has not ended; call end"),
    (lambda h: (h.begin(), h.comm_end()), r"^comm_end\(\): no communication began"),
    (lambda h: (h.begin(), h.add_bytes(-5)), r"^bytes: must be >= 0"),
    (lambda h: (h.begin(), h.add_bytes(2.5)), r"^bytes: must be an integer"),
    (lambda h: hook.IterationHook(rank=2, world_size=2), r"^rank: 2 is not below world_size 2"),
    (lambda h: hook.IterationHook(signal=True, job="j", signal_timeout_s=0),
     r"^signal_timeout_s: must be > 0"),
])
def test_misuse_is_one_line_naming_the_call(call, match: str) -> None:
    h = hook.IterationHook(rank=0, world_size=1)
    with pytest.raises(SpecError, match=match) as err:
        call(h)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- the agent


@pytest.fixture
def sock_dir() -> Iterator[str]:
    with short_tmp() as d:
        yield d


@pytest.fixture
def agent(sock_dir: str) -> Iterator[Agent]:
    with Agent(os.path.join(sock_dir, "agent.sock")).serving() as a:
        yield a


def test_the_signal_goes_at_the_end_of_each_iterations_communication(
        agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with hook.IterationHook(tmp_path, job="resnet", signal=True,
                            agent_socket=agent.path) as h:
        _loop(h, 4)
        assert h.stats() == hook.HookStats(4, 4, 0, 0)
    records = hook.read_records(tmp_path)
    assert [r.signal_seq for r in records] == [1, 2, 3, 4]
    assert [m for _, m in agent.received] == [{"op": "signal", "job": "resnet", "iteration": i}
                                              for i in range(4)]
    starts = [r.start for r in records[1:]] + [now()]
    for (arrived, _), r, next_start in zip(agent.received, records, starts, strict=True):
        assert r.comm_end <= arrived <= next_start   # after the bytes, before the next ones
    assert capsys.readouterr().err == ""


def test_the_environment_turns_the_signal_on(agent: Agent, monkeypatch) -> None:
    monkeypatch.setenv("MLTCP_HOOK_SIGNAL", "1")
    monkeypatch.setenv("MLTCP_JOB", "bert")
    monkeypatch.setenv("MLTCP_AGENT_SOCKET", agent.path)
    monkeypatch.delenv("MLTCP_HOOK_OUT", raising=False)
    with hook.from_env() as h:
        _loop(h, 2, comm=False)                 # no comm marks: the signal goes at end()
    assert h.last.signal_seq == 2 and [m["job"] for _, m in agent.received] == ["bert"] * 2


def test_a_refused_signal_is_counted_and_warned_about_once(agent: Agent, capsys) -> None:
    agent.refuse = "no job named 'resnet'"
    with hook.IterationHook(job="resnet", signal=True, agent_socket=agent.path) as h:
        _loop(h, 3)
    assert h.last.signal_error == "the agent refused: no job named 'resnet'"
    assert (h.last.signal_seq, h.last.signal_failures) == (None, 3)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "signal for job 'resnet' failed: the agent refused" in err[0]


def test_no_agent_listening_never_stops_training(sock_dir: str, tmp_path: Path, capsys) -> None:
    missing = os.path.join(sock_dir, "nobody-listens.sock")
    t0 = now()
    # A missing socket fails at once: had each signal waited out its timeout (2 s here),
    # the five iterations would take 10 s; the bound leaves a busy host 2 s for the rest.
    with hook.IterationHook(tmp_path, job="resnet", signal=True, agent_socket=missing,
                            signal_timeout_s=2.0) as h:
        _loop(h, 5)
        assert h.stats() == hook.HookStats(5, 0, 5, 0)
    assert now() - t0 < 2.0
    records = hook.read_records(tmp_path)
    assert [r.signal_failures for r in records] == [1, 2, 3, 4, 5]
    assert all(r.signal_error == f"cannot reach the agent at {missing} "
               "(No such file or directory)" for r in records)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "training goes on" in err[0]


def test_an_agent_that_does_not_answer_costs_one_deadline_then_is_skipped(agent: Agent) -> None:
    agent.hang = True
    t0 = now()
    # One deadline (0.3 s), not five (1.5 s): the bound leaves a busy host 0.9 s for the
    # rest.  The deadline stays well under the agent's hang (1 s, tests/hook_agent.py):
    # an agent that closes the connection before it is a failure, not a timeout, and
    # does not make the hook skip the next signals.
    with hook.IterationHook(job="resnet", signal=True, agent_socket=agent.path,
                            signal_timeout_s=0.3) as h:
        _loop(h, 5)
    assert 0.3 <= now() - t0 < 1.2
    assert h.last.signal_failures == 5 and h.last.signal_error.startswith("skipped: ")
    assert len(agent.received) == 1


def test_the_client_alone(agent: Agent) -> None:
    client = hook.AgentClient(agent.path)
    assert [client.signal("a"), client.signal("b")] == [1, 2]
    agent.refuse = "busy"
    with pytest.raises(hook.SignalFailed, match="^the agent refused: busy$"):
        client.signal("a")


# --------------------------------------------------------------------------- PyTorch


WORLD = 2


def _run_ranks(worker: Any, tmp: Path, *args: Any) -> None:
    """Two gloo ranks over loopback, each running ``worker(rank, world, tmp, *args)``
    between joining the process group and leaving it (:func:`_gloo_rank`)."""
    import torch.multiprocessing as mp

    mp.spawn(_gloo_rank, args=(worker, WORLD, str(tmp), *args), nprocs=WORLD)


def _gloo_rank(rank: int, worker: Any, world: int, tmp: str, *args: Any) -> None:
    """One rank: a file rendezvous in the test's directory, one intra-op thread each (two
    ranks share the runner's cores), then the worker, then the teardown the product's
    workload uses (mltcp.workloads.ddp).  The worker's models are gone when it returns;
    they are collected and the group destroyed while the interpreter is whole, and the
    process ends without the interpreter's finalization.  gloo's threads outlive
    destroy_process_group (checked: both pt_gloo_runloop threads still run after it and
    gc.collect), and one dropping a future's Python callback during finalization needs
    the GIL and aborts the rank after a successful run (std::terminate, SIGABRT: once in
    a CI run of the composition test)."""
    import torch
    import torch.distributed as dist

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"file://{Path(tmp, 'rendezvous')}",
                            rank=rank, world_size=world)
    torch.set_num_threads(1)
    worker(rank, world, tmp, *args)
    gc.collect()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _ddp_worker(rank: int, world: int, tmp: str, agent_path: str) -> None:
    """One DDP rank: a small CNN trained 5 iterations with the hook (signalling the test's
    agent) and, from the same start, without it; the two must end identical."""
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(),
                             nn.Linear(8 * 14 * 14, 64), nn.ReLU(), nn.Linear(64, 10))

    def train(ddp: DDP, h: hook.IterationHook | None) -> None:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(rank)
        for i in range(6):       # the first step is a warm-up outside the hook's iterations
            x, y = torch.randn(4, 3, 16, 16, generator=gen), torch.randint(0, 10, (4,),
                                                                           generator=gen)
            with h.iteration() if h and i else contextlib.nullcontext():
                opt.zero_grad()
                nn.functional.cross_entropy(ddp(x), y).backward()
                opt.step()

    hooked = DDP(model(), bucket_cap_mb=0.01)          # several buckets
    h = hook.IterationHook(tmp, job="cnn", signal=True, agent_socket=agent_path)
    h.attach_ddp(hooked)
    train(hooked, h)
    h.close()
    stray = h.stats().stray_reductions
    plain = DDP(model(), bucket_cap_mb=0.01)
    train(plain, None)
    same = all(torch.equal(a, b) for a, b in zip(hooked.parameters(), plain.parameters(),
                                                strict=True))
    grad_bytes = sum(p.numel() * p.element_size() for p in hooked.parameters())
    Path(tmp, f"result{rank}.json").write_text(json.dumps({"same": same, "stray": stray,
                                                           "grad_bytes": grad_bytes}))


def test_ddp_records_every_iteration_of_every_rank(agent: Agent, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    _run_ranks(_ddp_worker, tmp_path, agent.path)
    records = hook.read_records(tmp_path)
    assert [(r.rank, r.iteration) for r in records] == [(k, i) for k in (0, 1) for i in range(5)]
    for rank in (0, 1):
        result = json.loads((tmp_path / f"result{rank}.json").read_text())
        assert result["same"], "the timed all-reduce changed training"
        assert result["stray"] == 1         # the warm-up's one bucket, in no record
        mine = [r for r in records if r.rank == rank]
        assert all(r.bytes == result["grad_bytes"] for r in mine)
        assert all(r.world_size == 2 and _ordered(r) for r in mine)
        # several buckets: DDP rebuilt them after its first (warm-up) iteration's single one
        assert all(r.buckets >= 2 for r in mine)
        assert [r.signal_seq is not None for r in mine] == [True] * 5
    arrivals = sorted(t for t, _ in agent.received)
    assert len(arrivals) == 10
    for r, after in zip(records, records[1:] + [None], strict=True):
        # each signal came after the iteration's last bucket, before the next iteration
        next_start = after.start if after is not None and after.rank == r.rank else now()
        assert any(r.comm_end <= t <= next_start for t in arrivals)


def _fsdp_worker(rank: int, world: int, tmp: str) -> None:
    """FSDP2 (fully_shard) then FSDP1 (FullyShardedDataParallel), 3 iterations each."""
    import torch
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))

    grad_bytes = sum(p.numel() * p.element_size() for p in model().parameters())
    mesh = init_device_mesh("cpu", (world,))
    fsdp2 = model()
    for layer in (fsdp2[0], fsdp2[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(fsdp2, mesh=mesh)
    fsdp1 = FullyShardedDataParallel(model(), device_id=torch.device("cpu"))
    for name, m in (("fsdp2", fsdp2), ("fsdp1", fsdp1)):
        out = Path(tmp, name)
        with hook.IterationHook(out) as h:
            h.attach_fsdp(m)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            for _ in range(3):
                with h.iteration():
                    m(torch.randn(4, 32)).sum().backward()
                    opt.step()
                    opt.zero_grad()
        Path(out, f"grad_bytes{rank}").write_text(str(grad_bytes))


def test_fsdp_records_its_reduce_scatters(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    _run_ranks(_fsdp_worker, tmp_path)
    for name, reductions in (("fsdp2", 2), ("fsdp1", 1)):
        records = hook.read_records(tmp_path / name)
        grad_bytes = int((tmp_path / name / "grad_bytes0").read_text())
        assert [(r.rank, r.iteration) for r in records] == [(k, i) for k in (0, 1)
                                                            for i in range(3)], name
        for r in records:     # per layer (fsdp2) or one flat parameter (fsdp1), unpadded
            assert (r.buckets, r.bytes) == (reductions, grad_bytes) and _ordered(r), name


def test_attaching_to_a_model_that_is_not_ddp_or_fsdp_is_one_line() -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    with pytest.raises(SpecError, match=r"^model: a Linear is not DistributedDataParallel; "):
        hook.IterationHook().attach_ddp(nn.Linear(2, 2))
    with pytest.raises(SpecError, match=r"^model: a Linear is not an FSDP model; "):
        hook.IterationHook().attach_fsdp(nn.Linear(2, 2))
    h = hook.IterationHook()
    for kwargs, match in [
        ({"inner_hook": default_hooks.fp16_compress_hook},
         r"^model: a Linear is not DistributedDataParallel; inner_hook composes with DDP's "
         r"comm hooks only; wrap it first"),
        ({"inner_state": object()}, r"^inner_state: is given without inner_hook; "),
        ({"inner_hook": "fp16"}, r"^inner_hook: a str is not callable; pass a DDP comm hook"),
    ]:
        with pytest.raises(SpecError, match=match) as err:
            h.attach_ddp(nn.Linear(2, 2), **kwargs)
        assert "\n" not in str(err.value)
    assert not h._attached          # a refused attach leaves the hook free


def test_the_wire_bytes_of_a_comm_hook_it_does_not_know_are_the_buckets_and_it_says_so(
        capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    from mltcp.hook import torch_comm

    def my_hook(state, bucket):
        return default_hooks.allreduce_hook(state, bucket)

    for known, state in ((default_hooks.allreduce_hook, None),
                         (default_hooks.fp16_compress_hook, None),
                         (default_hooks.bf16_compress_hook, None),
                         (powerSGD_hook.batched_powerSGD_hook,
                          powerSGD_hook.PowerSGDState(None, start_powerSGD_iter=2))):
        torch_comm.wire_bytes(known, state)
    assert capsys.readouterr().err == ""
    torch_comm.wire_bytes(my_hook, None)
    err = capsys.readouterr().err.splitlines()
    assert err == ["mltcp.hook: attach_ddp does not know what inner_hook "
                   "test_the_wire_bytes_of_a_comm_hook_it_does_not_know_are_the_buckets_and_"
                   "it_says_so.<locals>.my_hook sends; the records' bytes are its buckets' "
                   "uncompressed sizes, not necessarily what it sends"]


# PowerSGD's start_powerSGD_iter in the tests below: iterations 0 and 1 all-reduce the
# bucket, 2 on compress (so both phases run).
POWERSGD_START = 2
COMPOSE_ITERATIONS = 5


def _mlp() -> Any:          # torch is imported by the caller
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 48), nn.ReLU(),
                         nn.Linear(48, 10))


def _inner_hooks() -> dict:
    """name -> (hook, a function making a fresh state, DDP's bucket_cap_mb): each run
    gets its own state.  fp16/bf16 run with several buckets; PowerSGD with one (the
    model is below DDP's 1 MB first bucket): over gloo, PowerSGD with several buckets
    aborts in PyTorch itself, hook or not (it issues its P and Q all-reduces from future
    callbacks, whose order differs between ranks: a collective mismatch).
    ``batched_powerSGD_hook`` is not here: in PyTorch 2.14 it fails on its own (its
    ``_orthogonalize`` asserts a batch of matrices and is given one)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    def powersgd(**kw: Any) -> Any:
        return lambda: psgd.PowerSGDState(None, matrix_approximation_rank=1,
                                          start_powerSGD_iter=POWERSGD_START, **kw)

    several, one = 0.01, 25
    return {
        "fp16": (default_hooks.fp16_compress_hook, lambda: None, several),
        "bf16": (default_hooks.bf16_compress_hook, lambda: None, several),
        "powersgd": (psgd.powerSGD_hook, powersgd(warm_start=False), one),
        "powersgd-warm": (psgd.powerSGD_hook, powersgd(warm_start=True), one),
        "powersgd-fp16": (default_hooks.fp16_compress_wrapper(psgd.powerSGD_hook),
                          powersgd(), one),
    }


def _compose_worker(rank: int, world: int, tmp: str) -> None:
    """Per inner hook: the same model trained twice from the same start, once with the
    hook registered on DDP and once through attach_ddp(inner_hook=...): every gradient
    and the final parameters must be bit for bit the same."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(ddp: DDP, h: hook.IterationHook | None) -> list:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(rank)
        seen = []
        for _ in range(COMPOSE_ITERATIONS):
            x, y = torch.randn(8, 32, generator=gen), torch.randint(0, 10, (8,), generator=gen)
            with h.iteration() if h else contextlib.nullcontext():
                opt.zero_grad()
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
                seen.append([p.grad.clone() for p in ddp.parameters()])
                opt.step()
        return seen + [[p.detach().clone() for p in ddp.parameters()]]

    def run(name: str, inner: Any, state: Any, cap: float) -> dict:
        plain = DDP(_mlp(), bucket_cap_mb=cap)
        plain.register_comm_hook(state(), inner)
        expected = train(plain, None)
        timed = DDP(_mlp(), bucket_cap_mb=cap)
        h = hook.IterationHook(Path(tmp, name))
        h.attach_ddp(timed, inner_hook=inner, inner_state=state())
        got = train(timed, h)
        h.close()
        same = all(torch.equal(a, b) for step_a, step_b in zip(expected, got, strict=True)
                   for a, b in zip(step_a, step_b, strict=True))
        moved = not torch.equal(expected[-1][0], _mlp()[0].weight)
        return {"same": same, "moved": moved, "stray": h.stats().stray_reductions}

    results = {name: run(name, *case) for name, case in _inner_hooks().items()}
    shapes = [list(p.shape) for p in _mlp().parameters()]
    Path(tmp, f"result{rank}.json").write_text(json.dumps({"cases": results,
                                                           "shapes": shapes}))


def _powersgd_elements(shapes: list[list[int]], rank: int = 1, min_rate: float = 2) -> int:
    """What powerSGD_hook all-reduces per iteration once it compresses (its docstring's
    rule, written out independently of the hook's counters): a parameter viewed as an
    n x m matrix is sent as P (n x r) and Q (m x r) when (n + m) r * min_rate < n m,
    else as it is."""
    total = 0
    for shape in shapes:
        n = shape[0]
        m = math.prod(shape[1:]) if len(shape) > 1 else 1
        r = min(n, m, rank)
        total += (n + m) * r if (n + m) * r * min_rate < n * m else n * m
    return total


def test_ddp_comm_hooks_compose_with_the_timed_hook_bit_for_bit(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    _run_ranks(_compose_worker, tmp_path)
    results = [json.loads((tmp_path / f"result{k}.json").read_text()) for k in (0, 1)]
    shapes = results[0]["shapes"]
    numel = sum(math.prod(s) for s in shapes)
    full, compressed = 4 * numel, 4 * _powersgd_elements(shapes)
    assert compressed < full / 5
    before = [full] * POWERSGD_START
    after = COMPOSE_ITERATIONS - POWERSGD_START
    expected_bytes = {
        "fp16": [2 * numel] * COMPOSE_ITERATIONS,
        "bf16": [2 * numel] * COMPOSE_ITERATIONS,
        "powersgd": before + [compressed] * after,
        "powersgd-warm": before + [compressed] * after,
        "powersgd-fp16": [full // 2] * POWERSGD_START + [compressed // 2] * after,
    }
    for name, per_iteration in expected_bytes.items():
        for rank, result in enumerate(results):
            case = result["cases"][name]
            assert case["same"], f"{name}, rank {rank}: the timed hook changed training"
            assert case["moved"] and case["stray"] == 0, name
        records = hook.read_records(tmp_path / name)
        assert [(r.rank, r.iteration) for r in records] == [
            (k, i) for k in (0, 1) for i in range(COMPOSE_ITERATIONS)], name
        buckets = 2 if name in ("fp16", "bf16") else 1   # several from step 2 on
        for rank in (0, 1):
            mine = [r for r in records if r.rank == rank]
            assert [r.bytes for r in mine] == per_iteration, (name, rank)
            assert all(r.buckets >= buckets and _ordered(r) for r in mine[1:]), name


def _compiled_worker(rank: int, world: int, tmp: str) -> None:
    """torch.compile(DDP) (Dynamo's DDPOptimizer; aot_eager needs no C++ compiler), the
    hook attached to the compiled model with fp16 compression inside, against the same
    compiled model with the fp16 hook registered alone."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(model: Any, h: hook.IterationHook | None) -> list:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(rank)
        seen = []
        for _ in range(3):
            x, y = torch.randn(8, 32, generator=gen), torch.randint(0, 10, (8,), generator=gen)
            with h.iteration() if h else contextlib.nullcontext():
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                seen += [p.grad.clone() for p in model.parameters()]
                opt.step()
        return seen

    def compiled(ddp: DDP) -> Any:
        torch._dynamo.reset()
        return torch.compile(ddp, backend="aot_eager")

    plain = DDP(_mlp())
    plain.register_comm_hook(None, default_hooks.fp16_compress_hook)
    expected = train(compiled(plain), None)
    model = compiled(DDP(_mlp()))
    with hook.IterationHook(Path(tmp, "compiled")) as h:
        h.attach_ddp(model, inner_hook=default_hooks.fp16_compress_hook)   # its DDP's
        got = train(model, h)
    same = all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    numel = sum(p.numel() for p in _mlp().parameters())
    Path(tmp, f"result{rank}.json").write_text(json.dumps({"same": same, "numel": numel}))


def test_a_compiled_ddp_model_is_timed_like_an_eager_one(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    _run_ranks(_compiled_worker, tmp_path)
    results = [json.loads((tmp_path / f"result{k}.json").read_text()) for k in (0, 1)]
    assert all(r["same"] for r in results), "the timed hook changed compiled training"
    records = hook.read_records(tmp_path / "compiled")
    assert [(r.rank, r.iteration, r.bytes) for r in records] == [
        (k, i, 2 * results[0]["numel"]) for k in (0, 1) for i in range(3)]
    assert all(r.buckets >= 1 and _ordered(r) for r in records)


def _accumulation_worker(rank: int, world: int, tmp: str, agent_path: str) -> None:
    """Gradient accumulation (DDP's no_sync) with the hook: one iteration per
    micro-batch, and one per optimizer step; then the refusals of a second comm hook."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    steps, micro = 2, 3                           # optimizer steps, micro-batches each

    def train(ddp: DDP, h: hook.IterationHook | None, per_micro: bool) -> list:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(rank)

        def backward(sync: bool) -> None:
            x, y = torch.randn(4, 32, generator=gen), torch.randint(0, 10, (4,), generator=gen)
            with contextlib.nullcontext() if sync else ddp.no_sync():
                torch.nn.functional.cross_entropy(ddp(x), y).backward()

        def marked(on: bool) -> Any:
            return h.iteration() if h is not None and on else contextlib.nullcontext()

        for _ in range(steps):
            with marked(not per_micro):
                for i in range(micro):
                    with marked(per_micro):
                        backward(sync=i == micro - 1)
                        if i == micro - 1:
                            opt.step()
                            opt.zero_grad()
        return [p.detach().clone() for p in ddp.parameters()]

    def errors() -> dict:
        out = {}
        registered = DDP(_mlp())
        registered.register_comm_hook(None, default_hooks.fp16_compress_hook)
        builtin = DDP(_mlp())
        builtin._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
        attached = DDP(_mlp())
        hook.IterationHook().attach_ddp(attached, inner_hook=default_hooks.fp16_compress_hook)
        for name, call in [
            ("registered", lambda: hook.IterationHook().attach_ddp(registered)),
            ("builtin", lambda: hook.IterationHook().attach_ddp(builtin)),
            ("after", lambda: attached.register_comm_hook(None,
                                                          default_hooks.allreduce_hook)),
            ("twice", lambda: hook.IterationHook().attach_ddp(attached)),
        ]:
            try:
                call()
                out[name] = None
            except SpecError as e:
                out[name] = str(e)
        return out

    results: dict = {"grad_bytes": sum(p.numel() * p.element_size()
                                       for p in _mlp().parameters())}
    plain = train(DDP(_mlp(), bucket_cap_mb=0.01), None, per_micro=True)
    for name, per_micro in (("micro", True), ("step", False)):
        ddp = DDP(_mlp(), bucket_cap_mb=0.01)
        with hook.IterationHook(Path(tmp, name), job=name, signal=True,
                                agent_socket=agent_path) as h:
            h.attach_ddp(ddp)
            got = train(ddp, h, per_micro)
        results[name] = all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))
    results["errors"] = errors()
    Path(tmp, f"result{rank}.json").write_text(json.dumps(results))


def test_gradient_accumulation_records_the_synchronising_step_and_a_second_comm_hook_is_refused(
        agent: Agent, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    _run_ranks(_accumulation_worker, tmp_path, agent.path)
    results = [json.loads((tmp_path / f"result{k}.json").read_text()) for k in (0, 1)]
    grad_bytes = results[0]["grad_bytes"]
    for result in results:
        assert result["micro"] and result["step"], "the hook changed accumulated training"
    micro = hook.read_records(tmp_path / "micro")
    assert len(micro) == 2 * 6
    for r in micro:
        if r.iteration % 3 == 2:      # the micro-batch that synchronises: the all-reduce
            assert (r.bytes, r.buckets >= 1, _ordered(r)) == (grad_bytes, True, True)
        else:                         # no_sync: nothing communicated, nothing seen
            assert (r.bytes, r.buckets, r.comm_start, r.comm_end) == (0, 0, None, None)
        assert r.signal_seq is not None        # every iteration signals (at end())
    step = hook.read_records(tmp_path / "step")
    assert [(r.rank, r.iteration, r.bytes) for r in step] == [
        (k, i, grad_bytes) for k in (0, 1) for i in range(2)]
    assert all(r.buckets >= 1 and _ordered(r) and r.signal_seq is not None for r in step)
    jobs = [m["job"] for _, m in agent.received]
    assert (jobs.count("micro"), jobs.count("step")) == (12, 4)
    fix = ("register none yourself: pass it to attach_ddp(model, inner_hook=hook, "
           "inner_state=state), which calls it and times it")
    for result in results:
        assert result["errors"] == {
            "registered": "inner_hook: the model has a comm hook registered already "
                          f"(fp16_compress_hook; DDP takes one); {fix}",
            "builtin": "inner_hook: the model has a comm hook registered already (DDP takes "
                       f"one); {fix}",
            "after": "inner_hook: the model's comm hook is MLTCP's timed hook (attach_ddp) "
                     f"already, and DDP takes one; {fix}",
            "twice": "model: has MLTCP's timed comm hook already (attach_ddp was called on "
                     "it before); use one IterationHook per model",
        }

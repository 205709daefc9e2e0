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
import os
import time
from collections.abc import Iterator
from pathlib import Path

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
    with hook.IterationHook(tmp_path, job="resnet", signal=True, agent_socket=missing) as h:
        _loop(h, 5)
        assert h.stats() == hook.HookStats(5, 0, 5, 0)
    assert now() - t0 < 1.0
    records = hook.read_records(tmp_path)
    assert [r.signal_failures for r in records] == [1, 2, 3, 4, 5]
    assert all(r.signal_error == f"cannot reach the agent at {missing} "
               "(No such file or directory)" for r in records)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "training goes on" in err[0]


def test_an_agent_that_does_not_answer_costs_one_deadline_then_is_skipped(agent: Agent) -> None:
    agent.hang = True
    t0 = now()
    with hook.IterationHook(job="resnet", signal=True, agent_socket=agent.path,
                            signal_timeout_s=0.1) as h:
        _loop(h, 5)
    assert 0.1 <= now() - t0 < 0.6
    assert h.last.signal_failures == 5 and h.last.signal_error.startswith("skipped: ")
    assert len(agent.received) == 1


def test_the_client_alone(agent: Agent) -> None:
    client = hook.AgentClient(agent.path)
    assert [client.signal("a"), client.signal("b")] == [1, 2]
    agent.refuse = "busy"
    with pytest.raises(hook.SignalFailed, match="^the agent refused: busy$"):
        client.signal("a")


# --------------------------------------------------------------------------- PyTorch


def _free_init(tmp: Path) -> str:
    return f"file://{tmp / 'rendezvous'}"


def _ddp_worker(rank: int, world: int, tmp: str, agent_path: str) -> None:
    """One DDP rank: a small CNN trained 5 iterations with the hook (signalling the test's
    agent) and, from the same start, without it; the two must end identical."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=_free_init(Path(tmp)), rank=rank,
                            world_size=world)
    torch.set_num_threads(1)

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
    # Release the DDP models (their reducers hold gloo's last work objects) while the
    # interpreter is whole; at its exit a gloo thread dropping one needs the GIL and can
    # abort the process (as mltcp.workloads.ddp explains).
    del hooked, plain
    gc.collect()
    dist.destroy_process_group()


def test_ddp_records_every_iteration_of_every_rank(agent: Agent, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    import torch.multiprocessing as mp

    mp.spawn(_ddp_worker, args=(2, str(tmp_path), agent.path), nprocs=2)
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
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=_free_init(Path(tmp)), rank=rank,
                            world_size=world)
    torch.set_num_threads(1)

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))

    def train_both() -> None:    # its models are gone when it returns (see _ddp_worker)
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

    train_both()
    gc.collect()
    dist.destroy_process_group()


def test_fsdp_records_its_reduce_scatters(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=TORCH_REASON)
    import torch.multiprocessing as mp

    mp.spawn(_fsdp_worker, args=(2, str(tmp_path)), nprocs=2)
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

    with pytest.raises(SpecError, match=r"^model: a Linear is not DistributedDataParallel; "):
        hook.IterationHook().attach_ddp(nn.Linear(2, 2))
    with pytest.raises(SpecError, match=r"^model: a Linear is not an FSDP model; "):
        hook.IterationHook().attach_fsdp(nn.Linear(2, 2))

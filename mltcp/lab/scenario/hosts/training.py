"""One plan's training jobs on real hosts: cgroups, datapath jobs, torchrun workers.

For every job of a plan this puts each host's workers in a cgroup of their own
(``mltcp-<run>/<job>`` under the host's cgroup2 mount), attaches that cgroup as an
MLTCP job on each kernel (zero-touch: the training script only carries the optional
hook), starts ``torchrun`` with the bundled DDP workload (:mod:`mltcp.workloads.ddp`)
on each host over SSH, and brings the hook's per-iteration records back.  For an MLTCP
scheme a run-scoped ``mltcp agent`` on every kernel keeps the jobs' configs fresh (they
expire after their stale timeout otherwise) and serves the hook's end-of-iteration
signal on ``/tmp/mltcp-hosts-<run>/agent.sock``; the datapath's own counts (iterations,
gap and budget boundaries, signals) are read before the jobs are detached.  Everything
it creates is undone by :meth:`HostRun.close`, also after a failed worker, a dead host,
Ctrl-C or SIGTERM: the cgroup's ``cgroup.kill`` ends every worker process there,
whatever became of the SSH channel that started it.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mltcp import hook
from mltcp.core.budget import JobDescription
from mltcp.core.errors import SpecError
from mltcp.lab.scenario.hosts import start as sync_start
from mltcp.lab.scenario.hosts.inventory import HostSpec, Inventory
from mltcp.lab.scenario.hosts.remote import HostFacts, RemoteHost, kernels
from mltcp.lab.scenario.hosts.ssh import HostError, Session, Shell
from mltcp.lab.scenario.plan import JobPlan, RunPlan
from mltcp.lab.scenario.spec import Workload

BASE_PORT = 29500                 # rendezvous port of job i: BASE_PORT + i
WORKLOAD_MODULE = "mltcp.workloads.ddp"
AGENT_START_S = 30.0              # the run's agent: its socket must appear within this
# What the datapath counted per job, from `mltcp status -j` (summed over kernels).
DATAPATH_COUNTS = ("iteration", "gaps", "wraps", "signals", "total_bytes", "stale_fallbacks")
# Kill every process of each cgroup given, all at once: once cgroup.kill is written they
# all have SIGKILL pending and run no more code, so the run's files can go at once.
_KILL = 'for c in "$@"; do echo 1 > "$c/cgroup.kill"; done; true'
# Remove each cgroup once empty (its processes take a moment to exit), then its parent
# (the run's) once that is too.
_REMOVE = ('for c in "$@"; do for i in $(seq 50); do rmdir "$c" 2>/dev/null && break; '
           'sleep 0.02; done; rmdir "$(dirname "$c")" 2>/dev/null; done; true')


def _on_each(items: list, undo: Callable[[object], None]) -> None:
    """``undo(item)`` for every item at once (threads: each a host's own steps, over its
    own SSH connection), each failure ignored, as a teardown must go on."""
    def guarded(item: object) -> None:
        with contextlib.suppress(Exception):
            undo(item)

    if items:
        with ThreadPoolExecutor(max_workers=len(items)) as pool:
            list(pool.map(guarded, items))


def host_for(plan: RunPlan, inventory: Inventory, name: str, field: str = "placement") -> HostSpec:
    """The inventory host playing the scenario's host ``name`` (h<i> is the i-th listed)."""
    index = plan.topology.host_names().index(name)
    if index >= len(inventory.hosts):
        raise SpecError(field, f"{name} has no host: {inventory.source} lists "
                        f"{len(inventory.hosts)}",
                        "add hosts to the inventory or place the job on fewer")
    return inventory.hosts[index]


@dataclass
class JobOnHosts:
    """One job of the plan as it runs: its hosts in rank order and what was created."""

    plan: JobPlan
    hosts: tuple[HostSpec, ...]
    datapath_name: str
    cgroup: str                      # relative to each host's cgroup2 mount
    remote_dir: str                  # the hook's records, on every host
    procs: list[tuple[HostSpec, subprocess.Popen]] = field(default_factory=list)


class HostRun:
    """One plan on the inventory's hosts (``open()``, ``run()``, ``close()``)."""

    def __init__(self, plan: RunPlan, inventory: Inventory, workdir: Path,
                 progress: Callable[[str], None] | None = None,
                 start_slack_s: float | None = None) -> None:
        self.plan = plan
        self.start_slack_s = sync_start.DEFAULT_SLACK_S if start_slack_s is None else start_slack_s
        self.launched_at = 0.0                        # wall clock of start()
        self.start_at: dict[str, float] = {}          # job -> the moment it was told
        self.went_at: float | None = None             # when the go files were written
        self.go_at: dict[str, float] = {}             # job -> the go file's moment
        self.inventory = inventory
        self.workdir = workdir
        self.say = progress or (lambda _msg: None)
        self.run_id = uuid.uuid4().hex[:8]
        self.sessions: dict[str, Session] = {}
        self.remotes: dict[str, RemoteHost] = {}
        self.facts: dict[str, HostFacts] = {}
        self.cgroup_roots: dict[str, str] = {}
        self._kernel_of: dict[str, str] = {}          # host -> its kernel's representative
        self.jobs: list[JobOnHosts] = []
        self._loaded: dict[str, list[str]] = {}      # kernel representative -> modules
        self._attached: list[tuple[str, str]] = []    # (representative host, job name)
        self._cgroups: list[tuple[str, str]] = []     # (representative host, cgroup)
        self._sysctls: list[tuple[str, str]] = []     # (host, previous default cc)
        self._shells: dict[str, Shell] = {}           # host -> its shell for the teardown
        self._agents: list[subprocess.Popen] = []     # the local ssh of each run's agent
        self._gradient_bytes: dict[object, int] = {}  # per workload
        self.datapath_counts: dict[str, dict] = {}   # job -> DATAPATH_COUNTS, budget, history

    # ------------------------------------------------------------------ mapping

    def host_of(self, name: str) -> HostSpec:
        return host_for(self.plan, self.inventory, name)

    # ------------------------------------------------------------------ set-up

    def open(self) -> None:
        names = []
        for job in self.plan.active_jobs:
            names += [self.host_of(h).name for h in job.hosts]
        names = list(dict.fromkeys(names))
        # The master connections start from this thread: they die with the thread that
        # started them (PR_SET_PDEATHSIG), so never from a pool's short-lived threads.
        for name in names:
            self.sessions[name] = Session(self.inventory.host(name), self.workdir / "ssh")
            self.remotes[name] = RemoteHost(self.inventory.host(name),
                                            self.sessions[name].open())
        # The questions go to all hosts at once (each is a channel on its connection).
        with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
            for name, facts, root in pool.map(self._meet, names):
                self.facts[name], self.cgroup_roots[name] = facts, root
                self.say(f"{name}: {facts.kernel}, torch {facts.torch}")
        for group in kernels(list(self.facts.values())).values():
            for name in group:
                self._kernel_of[name] = group[0]
        # Shells kept open for the teardown, started from this thread like the masters.
        for name in names:
            self._shells[name] = self.sessions[name].shell()

    def _meet(self, name: str) -> tuple[str, HostFacts, str]:
        return name, self.remotes[name].facts(), self._cgroup_root(name)

    def _cgroup_root(self, host: str) -> str:
        out = self.sessions[host].run([self.inventory.host(host).python, "-c",
                                       "from mltcp.host import datapath; "
                                       "print(datapath.cgroup2_root())"]).stdout.strip()
        if not out.startswith("/"):
            raise HostError(f"host {host}: no cgroup v2 mount ({out or 'nothing printed'})")
        return out

    def kernel_of(self, host: str) -> str:
        """The representative host of ``host``'s kernel."""
        return self._kernel_of[host]

    def prepare(self) -> None:
        """Modules, cgroups, datapath jobs, default congestion control: everything the
        workers need before they start, recorded for :meth:`close`."""
        scheme = self.plan.scheme
        kernel_hosts = sorted({self.kernel_of(h) for h in self.sessions})
        if scheme.mltcp:
            for rep in kernel_hosts:
                out = self.remotes[rep].mltcp("load", scheme.cc)
                loaded = out.get("loaded", []) if isinstance(out, dict) else []
                self._loaded[rep] = list(loaded)
        else:
            # The standard scheme: the kernel's own algorithm as each host's default (in a
            # namespace host, its namespace's), put back afterwards.
            for host, session in self.sessions.items():
                key = "net.ipv4.tcp_congestion_control"
                before = session.run(["sysctl", "-n", key]).stdout.strip()
                session.run(["sysctl", "-qw", f"{key}={scheme.cc}"])
                self._sysctls.append((host, before))
        for job in self.plan.active_jobs:
            hosts = tuple(self.host_of(h) for h in job.hosts)
            name = f"{job.name}-{self.run_id}"[:32]
            on = JobOnHosts(job, hosts, name, f"mltcp-{self.run_id}/{job.name}",
                            f"{self.remote_root}/{job.name}")
            self.jobs.append(on)
            for rep in sorted({self.kernel_of(h.name) for h in hosts}):
                root = self.cgroup_roots[rep]
                self.sessions[rep].run(["mkdir", "-p", f"{root}/{on.cgroup}"])
                self._cgroups.append((rep, f"{root}/{on.cgroup}"))
                if scheme.mltcp:
                    self.remotes[rep].mltcp(*self._attach_args(on, rep))
                    self._attached.append((rep, name))

        if scheme.mltcp:
            for rep in kernel_hosts:
                self._start_agent(rep)

    @property
    def remote_root(self) -> str:
        """The run's directory on every host (the hook's records, the agent's socket)."""
        return f"/tmp/mltcp-hosts-{self.run_id}"

    @property
    def agent_socket(self) -> str:
        return f"{self.remote_root}/agent.sock"

    def _start_agent(self, rep: str) -> None:
        """The run's ``mltcp agent`` on ``rep``'s kernel, in a cgroup of the run (so that
        :meth:`close` ends it with the workers), up once its signal socket is there."""
        host = self.inventory.host(rep)
        cgroup = f"{self.cgroup_roots[rep]}/mltcp-{self.run_id}/.agent"
        self.sessions[rep].run(["mkdir", "-p", cgroup, self.remote_root])
        self._cgroups.append((rep, cgroup))
        argv = [host.python, "-m", "mltcp.cli", "agent", "--interval", "1",
                "--signal-socket", self.agent_socket]
        script = f"echo $$ > {shlex.quote(cgroup)}/cgroup.procs && exec {shlex.join(argv)}"
        log_path = self.workdir / f"agent-{rep}.log"
        with log_path.open("w") as log:
            proc = self.sessions[rep].popen(["sh", "-c", script], stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT)
        self._agents.append(proc)
        deadline = time.monotonic() + AGENT_START_S
        while self.sessions[rep].run(["test", "-S", self.agent_socket],
                                     check=False).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln]
                raise HostError(f"host {rep}: the run's mltcp agent did not start: "
                                f"{lines[-1] if lines else 'no output'}")
            time.sleep(0.2)

    def _attach_args(self, on: JobOnHosts, rep: str) -> list[str]:
        scheme, job = self.plan.scheme, on.plan
        # The budget is what the job's sockets on this kernel send per iteration: one
        # host's share times the job's hosts on this kernel (namespace hosts share one).
        # A host's share is one rank's of a ring over all the job's ranks: with several
        # GPUs per host the ring leaves each host once (per channel), so its NIC sends
        # what one rank of the whole ring sends, 2(N-1)/N of the gradients.
        workload = job.spec.workload
        assert workload is not None
        ranks = sum(ranks_on(h, workload) for h in on.hosts)
        share = JobDescription(self.gradient_bytes(on), ranks,
                               job.spec.collective).bytes_per_iteration()
        on_kernel = sum(1 for h in on.hosts if self.kernel_of(h.name) == rep)
        args = ["job", "attach", on.datapath_name, "--cc", scheme.cc,
                "--budget", str(share * on_kernel),
                "--slope", repr(scheme.slope), "--intercept", repr(scheme.intercept),
                "--gap-ms", repr(job.idle_gap_ms), "--cgroup", on.cgroup]
        if scheme.cap is not None:
            args += ["--cap", repr(scheme.cap)]
        if workload.signal:     # boundaries from the hook's signals, none from idle gaps
            args.append("--signal")
        return args

    def gradient_bytes(self, on: JobOnHosts) -> int:
        """The workload's gradient bytes per iteration, as the first host's copy of the
        workload computes them (no training, no torch.distributed)."""
        workload = on.plan.spec.workload
        assert workload is not None
        if workload not in self._gradient_bytes:
            host = on.hosts[0]
            out = self.sessions[host.name].run(
                [host.python, "-m", WORKLOAD_MODULE, "--describe", *workload.model_args()],
                timeout_s=300).stdout
            self._gradient_bytes[workload] = int(
                json.loads(out.strip().splitlines()[-1])["gradient_bytes"])
        return self._gradient_bytes[workload]

    # ------------------------------------------------------------------ the workers

    def start(self) -> float:
        """Start every job's workers; returns the wall-clock time the jobs begin at."""
        self.launched_at = time.time()
        start_at = self.launched_at + self.start_slack_s
        for on in self.jobs:
            self.start_at[on.plan.name] = start_at + on.plan.start_ms / 1000
            for rank, host in enumerate(on.hosts):
                argv = self.worker_argv(on, rank, host, start_at)
                log = (self.workdir / f"{on.plan.name}-{rank}-{host.name}.log").open("w")
                proc = self.sessions[host.name].popen(argv, stdin=subprocess.DEVNULL,
                                                      stdout=log, stderr=subprocess.STDOUT)
                log.close()
                on.procs.append((host, proc))
        return start_at

    def worker_argv(self, on: JobOnHosts, rank: int, host: HostSpec, start_at: float) -> list[str]:
        """One host's part of a job: join the job's cgroup, then exec torchrun."""
        job, workload = on.plan, on.plan.spec.workload
        assert workload is not None
        master = on.hosts[0]
        env = {"MLTCP_HOOK_OUT": on.remote_dir, "MLTCP_JOB": on.datapath_name,
               "MLTCP_HOOK_SIGNAL": "1" if workload.signal and self.plan.scheme.mltcp else "0",
               "MLTCP_AGENT_SOCKET": self.agent_socket,
               "MLTCP_START_AT": repr(start_at + job.start_ms / 1000),
               "MLTCP_START_GO": self.go_file(on),
               "GLOO_SOCKET_IFNAME": host.data_iface, "NCCL_SOCKET_IFNAME": host.data_iface,
               "NCCL_IB_DISABLE": "1", "OMP_NUM_THREADS": "1"}
        torchrun = [host.python, "-m", "torch.distributed.run", f"--nnodes={len(on.hosts)}",
                    f"--node_rank={rank}", f"--nproc_per_node={ranks_on(host, workload)}",
                    f"--master_addr={master.data_addr}", f"--master_port={BASE_PORT + job.index}",
                    # the command line the scenario checked by the workload's rules
                    "-m", WORKLOAD_MODULE, *workload.argv(job.spec.iterations, self.plan.seed)]
        cgroup = f"{self.cgroup_roots[self.kernel_of(host.name)]}/{on.cgroup}"
        script = (f"mkdir -p {shlex.quote(on.remote_dir)} && "
                  f"echo $$ > {shlex.quote(cgroup)}/cgroup.procs && "
                  f"exec env {' '.join(f'{k}={shlex.quote(v)}' for k, v in env.items())} "
                  f"{shlex.join(torchrun)}")
        return ["sh", "-c", script]

    @staticmethod
    def go_file(on: JobOnHosts) -> str:
        """Where a job's workers look for their go moment, on each of its hosts."""
        return f"{on.remote_dir}/start-go"

    def _rank0_log(self, on: JobOnHosts) -> Path:
        return self.workdir / f"{on.plan.name}-0-{on.hosts[0].name}.log"

    def go_when_ready(self) -> None:
        """Once every job's rank 0 said it is ready, write each job's go file, on each of
        its hosts, with a moment :data:`~.start.GO_AHEAD_S` ahead: the jobs start then,
        not at the end of the slack (:mod:`.start`).  A write that fails leaves that
        host's ranks to start at their ``MLTCP_START_AT``; the skew record shows it.
        Each write goes through the host's open shell (:meth:`_on_host`: no SSH session
        to start, which takes up to a second on busy CPUs, the whole of GO_AHEAD_S).
        They run on threads of their own and nothing waits for them: a host that stops
        answering just then must not hold up the run's Ctrl-C, and the teardown ends
        their shells and ssh processes with the connections."""
        if self.went_at is not None or not self.jobs:
            return
        for on in self.jobs:
            log = self._rank0_log(on)
            if not log.exists() or sync_start.ready_at(log.read_text(errors="replace")) is None:
                return
        self.went_at = time.time()
        go = self.went_at + sync_start.GO_AHEAD_S
        self.go_at = {on.plan.name: go + on.plan.start_ms / 1000 for on in self.jobs
                      if go + on.plan.start_ms / 1000 < self.start_at[on.plan.name]}
        writes = [(on, host) for on in self.jobs if on.plan.name in self.go_at
                  for host in dict.fromkeys(on.hosts)]

        def write(on: JobOnHosts, host: HostSpec) -> None:
            # Whole, by a rename, from a file of this host's own: hosts may share a
            # filesystem (the namespace hosts of one machine do), and a shared temporary
            # file, truncated by one while another renamed it, could be read empty.
            path = self.go_file(on)
            tmp = shlex.quote(f"{path}.{host.name}.tmp")
            moment = shlex.quote(repr(self.go_at[on.plan.name]))
            with contextlib.suppress(Exception):     # that host falls back (see above)
                self._on_host(host.name, f"printf '%s\\n' {moment} > {tmp} && "
                                         f"mv {tmp} {shlex.quote(path)}", timeout_s=10)

        for on, host in writes:
            threading.Thread(target=write, args=(on, host), daemon=True,
                             name=f"go-{on.plan.name}-{host.name}").start()

    def wait(self, timeout_s: float) -> None:
        """Until every worker ended, starting the jobs once all are ready
        (:meth:`go_when_ready`); a failed worker stops the run with its host, job and the
        last line of its output."""
        deadline = time.monotonic() + timeout_s
        next_say = time.monotonic() + 5
        while True:
            self.go_when_ready()
            running = 0
            for on in self.jobs:
                for rank, (host, proc) in enumerate(on.procs):
                    code = proc.poll()
                    if code is None:
                        running += 1
                    elif code != 0:
                        raise HostError(f"host {host.name}: job {on.plan.name} worker {rank} "
                                        f"exited {code}: {self._last_log_line(on, rank, host)}")
            if not running:
                return
            if time.monotonic() > deadline:
                raise HostError(f"the jobs did not finish within {timeout_s:g} s")
            if time.monotonic() >= next_say:
                next_say += 5
                self.say(f"{self.plan.stem}: {running} workers running")
            time.sleep(0.2)

    def _last_log_line(self, on: JobOnHosts, rank: int, host: HostSpec) -> str:
        path = self.workdir / f"{on.plan.name}-{rank}-{host.name}.log"
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        return lines[-1].strip() if lines else "no output"

    def start_record(self, records: dict[str, list[hook.IterationHookRecord]],
                     attempt: int = 1) -> dict:
        """How the synchronized start went (:func:`.start.start_record`): each job's
        first-iteration skew, and its start-up from its rank 0's "ready at" line.  The
        skew is measured from the moment the run meant (the go file's, once written),
        not the one a rank took: a host whose go file never came starts its job at
        ``MLTCP_START_AT``, and that job is late, however well it kept its own time."""
        ready = {}
        for on in self.jobs:
            path = self._rank0_log(on)
            ready[on.plan.name] = sync_start.ready_at(path.read_text(errors="replace")) \
                if path.exists() else None
        told = {**self.start_at, **self.go_at}
        first = {name: min(r.start_wall for r in recs) for name, recs in records.items()}
        return sync_start.start_record(self.launched_at, self.start_slack_s, told,
                                       first, ready, attempt)

    def collect(self) -> dict[str, list[hook.IterationHookRecord]]:
        """Each job's hook records of rank 0 (DDP steps in lock-step: rank 0 stands for
        the job), copied back from the host that ran it."""
        out = {}
        for on in self.jobs:
            host = on.hosts[0]
            local = self.workdir / f"{on.plan.name}-rank0.jsonl"
            self.sessions[host.name].get(f"{on.remote_dir}/hook-rank0.jsonl", local)
            out[on.plan.name] = hook.read_records(local)
        return out

    def read_datapath(self) -> dict[str, dict]:
        """What the datapath counted for each job (an MLTCP scheme's), summed over the
        kernels it ran on: read before :meth:`close` detaches the jobs."""
        by_name = {on.datapath_name: on.plan.name for on in self.jobs}
        counts: dict[str, dict] = {}
        for rep in sorted({rep for rep, _name in self._attached}):
            statuses = self.remotes[rep].mltcp("status")
            for st in statuses if isinstance(statuses, list) else []:
                job = by_name.get(st.get("name"))
                if job is None:
                    continue
                mine = counts.setdefault(job, dict.fromkeys(DATAPATH_COUNTS, 0)
                                         | {"budget": 0, "history": []})
                for key in DATAPATH_COUNTS:
                    mine[key] += int(st.get(key, 0))
                mine["budget"] += int(st.get("budget", 0))
                # bytes between the last boundaries (gap or signal), oldest first
                mine["history"] += [int(b) for b in st.get("history", [])]
        self.datapath_counts = counts
        return counts

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """Undo everything, whatever failed before; then end the sessions.

        Two steps, each on every host at once, through the shell kept open on it for
        this: the workers' and agents' cgroups killed; then on each host one script that
        detaches the run's jobs
        and unloads its modules (on a kernel's representative host), removes the emptied
        cgroups, puts the default congestion control back and removes the run's files.
        Done one host and one step after another, with a Python start for each job's
        detach, a Ctrl-C took 4-5 s on 4 namespace hosts of a 2-core machine; a command
        per step on every host at once, 2.7-3.0 s; one script per host over new SSH
        commands, 1.3-1.6 s, most of it the commands' session starts (0.4-0.9 s each on
        CPUs the dying workers still hold); through the open shells 0.49-0.65 s
        (bench/bench_ctrl_c.py, the hosts case)."""
        cgroups: dict[str, list[str]] = {}
        for rep, cgroup in reversed(self._cgroups):
            cgroups.setdefault(rep, []).append(cgroup)
        _on_each(list(cgroups.items()), lambda item: self._on_host(
            item[0], shlex.join(["sh", "-c", _KILL, "sh", *item[1]])))
        for proc in [proc for on in self.jobs for _host, proc in on.procs] + self._agents:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        _on_each(list(self.sessions), lambda host: self._on_host(
            host, self._undo_script(host, cgroups.get(host, []))))
        _on_each(list(self._shells.values()), lambda shell: shell.close())
        self._shells.clear()
        _on_each(list(self.sessions.values()), lambda session: session.close())
        self.sessions.clear()

    def _on_host(self, host: str, script: str, timeout_s: float = 60) -> None:
        """``script`` on ``host``: through its open shell (no SSH session to start), or
        as a command of its own where the shell is gone or never started."""
        shell = self._shells.get(host)
        if shell is None or not shell.run(script, timeout_s):
            self.sessions[host].run(["sh", "-c", script], timeout_s=timeout_s, check=False)

    def _undo_script(self, host: str, cgroups: list[str]) -> str:
        """What :meth:`close` runs on ``host`` once the cgroups are killed: each step
        whatever the one before did (a teardown goes on), in the order prepare's undo
        needs: jobs before their modules, cgroups empty before the run's files go."""
        steps: list[list[str]] = []
        names = [name for rep, name in reversed(self._attached) if rep == host]
        if names:
            steps.append(self.remotes[host].mltcp_argv("job", "detach", *names))
        if self._loaded.get(host):
            steps.append(self.remotes[host].mltcp_argv("unload", *self._loaded[host]))
        if cgroups:
            steps.append(["sh", "-c", _REMOVE, "sh", *cgroups])
        before = dict(reversed(self._sysctls)).get(host)     # the first value it had
        if before is not None:
            steps.append(["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={before}"])
        steps.append(["rm", "-rf", self.remote_root])
        return "; ".join(shlex.join(step) for step in steps)


def ranks_on(host: HostSpec, workload: Workload) -> int:
    """Ranks a job runs on ``host``: one per GPU with NCCL (the inventory's ``gpus``),
    else one.  The ranks of one host signal the same iteration's end, which the agent
    takes once."""
    return host.gpus if workload.backend == "nccl" and host.gpus else 1

"""The long-running control plane of a host.

It keeps every job's config fresh (so the datapath's staleness fallback fires
only when the agent is really gone), applies learned budgets, and serves the
Prometheus metrics over HTTP.  With ``signal_socket`` it also takes the training
processes' end-of-iteration signals on a Unix socket (:mod:`mltcp.host.signal_socket`),
the signal without root.  With ``--config FILE`` it first makes the host match
that job file (:mod:`mltcp.host.jobfile`: modules loaded, declared jobs attached), so
the jobs come back after a reboot or a crash, and applies it again on SIGHUP
(``systemctl reload``); a file that became invalid is logged and the jobs stay as
they are.  SIGTERM/SIGINT stop it cleanly: the HTTP server is shut down and the
configs are left to expire, which returns the flows to the standard algorithm after
the jobs' stale timeout.

Under a ``Type=notify`` systemd unit (``mltcp/host/systemd/mltcp-agent.service``) it tells
systemd its state (:mod:`mltcp.host.sd_notify`): ``READY=1`` once it serves (the metrics
and signal sockets bound, the job file applied, the first refresh done), ``RELOADING=1``
... ``READY=1`` around a SIGHUP's apply, ``STOPPING=1`` when it stops, a ``STATUS=`` line
when its state changes, and ``WATCHDOG=1`` from the refresh loop every half of
``$WATCHDOG_USEC``: a loop that hangs stops the pings, and systemd restarts the agent.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path

from mltcp.core import validate
from mltcp.core.errors import MltcpError
from mltcp.host import datapath, jobfile, jobs
from mltcp.host.exposition import HttpEndpoint
from mltcp.host.sd_notify import Notifier
from mltcp.host.signal_socket import SignalSocket

log = logging.getLogger("mltcp.host.agent")


class Agent:
    def __init__(self, interval_s: float = 1.0, metrics_port: int | None = None,
                 metrics_addr: str = "127.0.0.1", registry: jobs.Registry | None = None,
                 config: str | Path | None = None,
                 signal_socket: str | Path | None = None,
                 metrics_flows: int | None = None) -> None:
        """``metrics_flows``: export per-flow series, at most this many per job (None:
        job-level aggregates only; see :mod:`mltcp.host.exposition`)."""
        validate.number(interval_s, "interval", 0.05, 60,
                        fix="use 0.05 .. 60 s, well below the jobs' stale timeout")
        if metrics_port is not None:
            # 0: any free port (tests, and callers that read it back from the server)
            validate.integer(metrics_port, "metrics-port", 0, 65535, "9465")
        self.interval_s = interval_s
        self.notifier = Notifier()     # systemd's notify socket; a no-op without one
        self.registry = registry or jobs.Registry()
        self.stop_event = threading.Event()
        self.reload_event = threading.Event()
        self._wake = threading.Event()          # stop() or reload(): do not wait the tick out
        self.config = Path(config) if config is not None else None
        if self.config is not None:
            jobfile.load_file(self.config)      # a bad file stops the start, in one line
        self.last_refresh: float | None = None        # monotonic time of the last success
        self.last_error: str | None = None
        self.http: HttpEndpoint | None = None
        if metrics_port is not None:
            self.http = HttpEndpoint(metrics_addr, metrics_port, self.registry, self.health,
                                     flows_per_job=metrics_flows)
        self.signals: SignalSocket | None = None
        if signal_socket is not None:
            try:
                self.signals = SignalSocket(signal_socket, self.registry)
            except BaseException:
                if self.http:
                    self.http.close()
                raise

    @property
    def metrics_port(self) -> int | None:
        return self.http.address[1] if self.http else None

    def health(self) -> tuple[bool, dict]:
        """Healthy while the jobs' configs are being refreshed: the last refresh is
        recent (three intervals, at least 2 s) and the registry readable."""
        age = None if self.last_refresh is None else time.monotonic() - self.last_refresh
        fresh = age is not None and age <= max(3 * self.interval_s, 2.0)
        detail = {"last_refresh_age_s": None if age is None else round(age, 3),
                  "modules": datapath.loaded_modules(), "error": self.last_error}
        return fresh and self.last_error is None, detail

    def tick(self) -> dict[str, int]:
        try:
            learned = jobs.refresh(self.registry)
        except jobs.RegistryError as exc:
            # Keep the live jobs alive on their kernel configs; say why once per message.
            renewed = jobs.keep_kernel_configs_fresh()
            if str(exc) != self.last_error:
                log.error("%s (renewing %d kernel configs as they are)", exc, renewed)
                self.last_error = str(exc)
                self.notifier.status(f"degraded: {exc}")
            self.last_refresh = time.monotonic()
            return {}
        if self.last_error is not None:
            self.notifier.status(self.serving())
        self.last_error = None
        self.last_refresh = time.monotonic()
        for name, budget in learned.items():
            log.info("job %s: learned budget %d bytes per iteration", name, budget)
        return learned

    def serving(self) -> str:
        """What the agent serves, in one line (its STATUS= while all is well)."""
        parts = [f"refreshing job configs every {self.interval_s:g} s"]
        if self.config is not None:
            parts.append(f"jobs from {self.config}")
        if self.http:
            parts.append("metrics on http://{}:{}/metrics".format(*self.http.address))
        if self.signals:
            parts.append(f"signals on {self.signals.path}")
        return "; ".join(parts)

    def apply_config(self) -> jobfile.ApplyResult | None:
        """Make the host match the job file (at start and on SIGHUP); None without one."""
        if self.config is None:
            return None
        result = jobfile.apply(jobfile.load_file(self.config), self.registry)
        log.info("applied %s: %s", self.config, result.describe())
        return result

    def reload(self) -> None:
        """Ask the loop to apply the job file again (what SIGHUP does)."""
        self.reload_event.set()
        self._wake.set()

    def run(self) -> None:
        """Refresh until stop() (or SIGTERM/SIGINT when run in the main thread)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
            signal.signal(signal.SIGHUP, lambda *_: self.reload())
        try:
            self.apply_config()
            if self.http:
                log.info("metrics on http://%s:%d/metrics, health on /healthz",
                         *self.http.address)
            if self.signals:
                log.info("end-of-iteration signals on %s", self.signals.path)
            self._loop()
        except BaseException as exc:
            self.notifier.stopping(f"failed: {exc}" if isinstance(exc, Exception) else None)
            raise
        else:
            self.notifier.stopping("stopping")
        finally:
            if self.http:
                self.http.close()
            if self.signals:
                self.signals.close()
            self.notifier.close()
            log.info("agent stopped")

    def _loop(self) -> None:
        """Tick every interval_s; READY=1 after the first tick, WATCHDOG=1 when due."""
        ready = False
        next_tick = time.monotonic()
        while not self.stop_event.is_set():
            reloaded = self.reload_event.is_set()
            failed = None
            if reloaded:
                self.reload_event.clear()
                self.notifier.reloading(f"reloading {self.config}" if self.config else
                                        "reloading: no --config, nothing to apply")
                try:
                    self.apply_config()
                except MltcpError as exc:   # keep the jobs as they are
                    log.error("reload of %s failed, jobs unchanged: %s", self.config, exc)
                    failed = f"reload of {self.config} failed, jobs unchanged: {exc}"
            if reloaded or time.monotonic() >= next_tick:
                try:
                    self.tick()
                except Exception as exc:  # keep serving; the datapath falls back safely
                    log.warning("refresh failed: %s", exc)
                next_tick = time.monotonic() + self.interval_s
            if reloaded or not ready:
                self.notifier.ready(failed or (self.serving() if self.last_error is None
                                               else f"degraded: {self.last_error}"))
                ready = True
            self.notifier.watchdog()
            wait = next_tick - time.monotonic()
            ping = self.notifier.watchdog_due_in()
            if ping is not None:
                wait = min(wait, ping)
            self._wake.wait(max(0.0, wait))
            self._wake.clear()

    def stop(self) -> None:
        self.stop_event.set()
        self._wake.set()

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
from mltcp.host.signal_socket import SignalSocket

log = logging.getLogger("mltcp.host.agent")


class Agent:
    def __init__(self, interval_s: float = 1.0, metrics_port: int | None = None,
                 metrics_addr: str = "127.0.0.1", registry: jobs.Registry | None = None,
                 config: str | Path | None = None,
                 signal_socket: str | Path | None = None) -> None:
        validate.number(interval_s, "interval", 0.05, 60,
                        fix="use 0.05 .. 60 s, well below the jobs' stale timeout")
        if metrics_port is not None:
            # 0: any free port (tests, and callers that read it back from the server)
            validate.integer(metrics_port, "metrics-port", 0, 65535, "9465")
        self.interval_s = interval_s
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
            self.http = HttpEndpoint(metrics_addr, metrics_port, self.registry, self.health)
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
            self.last_refresh = time.monotonic()
            return {}
        self.last_error = None
        self.last_refresh = time.monotonic()
        for name, budget in learned.items():
            log.info("job %s: learned budget %d bytes per iteration", name, budget)
        return learned

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
        self.apply_config()
        if self.http:
            log.info("metrics on http://%s:%d/metrics, health on /healthz", *self.http.address)
        if self.signals:
            log.info("end-of-iteration signals on %s", self.signals.path)
        try:
            while not self.stop_event.is_set():
                if self.reload_event.is_set():
                    self.reload_event.clear()
                    try:
                        self.apply_config()
                    except MltcpError as exc:   # keep the jobs as they are
                        log.error("reload of %s failed, jobs unchanged: %s", self.config, exc)
                try:
                    self.tick()
                except Exception as exc:  # keep serving; the datapath falls back safely
                    log.warning("refresh failed: %s", exc)
                self._wake.wait(self.interval_s)
                self._wake.clear()
        finally:
            if self.http:
                self.http.close()
            if self.signals:
                self.signals.close()
            log.info("agent stopped")

    def stop(self) -> None:
        self.stop_event.set()
        self._wake.set()

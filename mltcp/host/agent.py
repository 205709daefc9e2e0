"""The long-running control plane of a host.

It keeps every job's config fresh (so the datapath's staleness fallback fires
only when the agent is really gone), applies learned budgets, and serves the
Prometheus metrics over HTTP.  With ``--config FILE`` it first makes the host match
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from mltcp.core import validate
from mltcp.core.errors import MltcpError
from mltcp.host import jobfile, jobs, telemetry

log = logging.getLogger("mltcp.host.agent")


class _MetricsHandler(BaseHTTPRequestHandler):
    registry: jobs.Registry

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        if self.path not in ("/metrics", "/"):
            self.send_error(404, "try /metrics")
            return
        body = telemetry.to_prometheus(telemetry.collect(self.registry)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: object) -> None:
        log.debug("http: " + fmt, *args)


class Agent:
    def __init__(self, interval_s: float = 1.0, metrics_port: int | None = None,
                 metrics_addr: str = "127.0.0.1", registry: jobs.Registry | None = None,
                 config: str | Path | None = None) -> None:
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
        self._last_registry_error: str | None = None
        self.server: ThreadingHTTPServer | None = None
        if metrics_port is not None:
            handler = type("Handler", (_MetricsHandler,), {"registry": self.registry})
            self.server = ThreadingHTTPServer((metrics_addr, metrics_port), handler)

    @property
    def metrics_port(self) -> int | None:
        return self.server.server_address[1] if self.server else None

    def tick(self) -> dict[str, int]:
        try:
            learned = jobs.refresh(self.registry)
        except jobs.RegistryError as exc:
            # Keep the live jobs alive on their kernel configs; say why once per message.
            renewed = jobs.keep_kernel_configs_fresh()
            if str(exc) != self._last_registry_error:
                log.error("%s (renewing %d kernel configs as they are)", exc, renewed)
                self._last_registry_error = str(exc)
            return {}
        self._last_registry_error = None
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
        http_thread = None
        if self.server:
            http_thread = threading.Thread(target=self.server.serve_forever, daemon=True)
            http_thread.start()
            log.info("metrics on http://%s:%d/metrics", *self.server.server_address[:2])
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
            if self.server:
                self.server.shutdown()
                self.server.server_close()
            if http_thread:
                http_thread.join(timeout=5)
            log.info("agent stopped")

    def stop(self) -> None:
        self.stop_event.set()
        self._wake.set()

"""Serving the HTTP face from a thread of the daemon's process (uvicorn)."""

from __future__ import annotations

import logging
import threading
import time

from gpuplan.http.context import ApiContext

log = logging.getLogger("gpuplan.http")

START_TIMEOUT_S = 15.0


class HttpServer:
    """uvicorn on ``host:port`` in a daemon thread; :meth:`start` returns once it listens."""

    def __init__(self, context: ApiContext, host: str, port: int) -> None:
        import uvicorn

        from gpuplan.http.app import create_app

        self.host, self.port = host, port
        # The access log shows the client, method, path and status, never a header (the
        # bearer token travels in one; no route takes a token in its path or query).
        config = uvicorn.Config(
            create_app(context),
            host=host,
            port=port,
            log_config=None,  # the process's logging: one format, and the daemon's -v decides
            access_log=True,
            lifespan="off",
            server_header=False,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="gpuplan-http", daemon=True)
        self.failed: BaseException | None = None

    def _run(self) -> None:
        try:
            self.server.run()
        except BaseException as error:
            self.failed = error

    def start(self) -> HttpServer:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OSError(f"cannot serve HTTP on {self.host}:{self.port} (is the port in use?)")
            time.sleep(0.02)
        log.info("HTTP API on http://%s:%d/ (OpenAPI at /v1/openapi.json)", self.host, self.port)
        return self

    @property
    def bound_port(self) -> int:
        """The port it listens on (the one asked for, or the kernel's pick for port 0)."""
        for server in self.server.servers:
            for sock in server.sockets:
                port: int = sock.getsockname()[1]
                return port
        return self.port

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout=10)

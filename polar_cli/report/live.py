"""The report while a run goes on: `Refresher` rebuilds it every N finished sessions (`polar generate
--report-every N`), `view` serves it on a local port and rebuilds it when the run's files change (`polar view`).

A rebuild runs in a thread of its own, one at a time: the run's event loop never waits for it, and a request for a
rebuild while one is under way is remembered and done right after.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from polar_cli.generate.state import CORPUS, ERRORS, REJECTS, STATE
from polar_cli.report.build import REPORT, build_report

log = logging.getLogger("polar.report")


class Rebuilder:
    """Rebuild the report of ``run_dir`` in a background thread, at most one at a time."""

    def __init__(self, run_dir: Path, *, refresh: bool = False, build: Callable[..., Any] = build_report) -> None:
        self.run_dir = run_dir
        self.refresh = refresh
        self._build = build
        self._lock = threading.Lock()
        self._busy = False
        self._again = False
        self._thread: threading.Thread | None = None
        self.builds = 0

    def request(self) -> None:
        with self._lock:
            if self._busy:
                self._again = True
                return
            self._busy = True
        self._thread = threading.Thread(target=self._loop, name="polar-report", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                self._build(self.run_dir, refresh=self.refresh)
                self.builds += 1
            except Exception:  # a report is never worth a run: the next rebuild tries again
                log.exception("report of %s failed", self.run_dir)
            with self._lock:
                if not self._again:
                    self._busy = False
                    return
                self._again = False

    def wait(self, timeout: float = 120.0) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)


class Refresher:
    """`polar generate --report-every N`: a listener of finished sessions that rebuilds every ``every`` of them."""

    def __init__(self, run_dir: Path, every: int) -> None:
        self.every = max(1, every)
        self.seen = 0
        self.rebuilder = Rebuilder(run_dir)

    def __call__(self, kind: str, row: dict[str, Any]) -> None:
        self.seen += 1
        if self.seen % self.every == 0:
            self.rebuilder.request()

    def start(self) -> None:
        self.rebuilder.request()  # the report of what a resumed run already has, at once

    def close(self) -> None:
        """The last rebuild, after the summary: the report of the finished run."""
        self.rebuilder.wait()
        self.rebuilder.request()
        self.rebuilder.wait()


def _fingerprint(run_dir: Path) -> tuple[tuple[int, int], ...]:
    out = []
    for name in (STATE, CORPUS, REJECTS, ERRORS, "summary.json", "journal.jsonl"):
        try:
            st = (run_dir / name).stat()
            out.append((st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((0, 0))
    return tuple(out)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("view: " + format, *args)

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()


def view(
    run_dir: Path,
    *,
    host: str,
    port: int,
    interval: float,
    ready: Callable[[str], None],
    stop: threading.Event | None = None,
) -> None:
    """Serve RUN_DIR/report on ``host:port`` until interrupted (or ``stop`` is set); rebuild it when the run's files
    changed."""
    stop = stop or threading.Event()
    rebuilder = Rebuilder(run_dir, refresh=True)
    build_report(run_dir, refresh=True)
    handler = functools.partial(_Quiet, directory=str(run_dir / REPORT))
    server = ThreadingHTTPServer((host, port), handler)
    thread = threading.Thread(target=server.serve_forever, name="polar-view", daemon=True)
    thread.start()
    ready(f"http://{host}:{server.server_address[1]}/")
    seen = _fingerprint(run_dir)
    try:
        while not stop.wait(interval):
            now = _fingerprint(run_dir)
            if now != seen:
                seen = now
                rebuilder.request()
    finally:
        server.shutdown()
        server.server_close()
        rebuilder.wait()

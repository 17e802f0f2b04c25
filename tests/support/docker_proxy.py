"""A Unix-socket proxy in front of the Docker engine's socket, which a test can take down and bring back: to the
Docker client in front of it (``DOCKER_HOST=unix://PROXY``) that is the engine dying and restarting, while the real
engine, which other tests share, never stops.

``down()`` closes every open connection (streams in progress end as a dead engine's would) and removes the socket
(new connections fail as against a stopped daemon); ``up()`` listens again. (A daemon restart also stops the
containers: the test does that itself, to the run's own containers only.) What it cannot show: a daemon that hangs
without closing its sockets, and the engine's own restart policies and live-restore.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path
from typing import Any

ENGINE_SOCKET = "/var/run/docker.sock"


class DockerProxy:
    def __init__(self, path: Path, engine: str = ENGINE_SOCKET) -> None:
        self.path = path
        self.engine = engine
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def up(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(256)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Stop answering: every connection closed, the socket gone."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                engine.connect(self.engine)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.update((client, engine))
            for src, dst in ((client, engine), (engine, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._conns.discard(src)

    def __enter__(self) -> DockerProxy:
        self.up()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.down()


__all__ = ["ENGINE_SOCKET", "DockerProxy"]

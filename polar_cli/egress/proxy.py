"""The egress proxy: a thin asyncio shell over `policy`, one Unix socket per session, every attempt logged.

`EgressProxy.open` gives a session its own socket (`EGRESS_SOCKET_NAME`, alone in a fresh private directory that
the session's container mounts read-only; the relay forwards 127.0.0.1:`EGRESS_PORT` to it), so each connection
belongs to one session and follows that session's `Allowlist`. A connection sends one request head: ``CONNECT
host:port`` opens a tunnel (``200 Connection established``, then bytes both ways), an absolute-URI ``http://``
request is forwarded in origin form with ``Connection: close``. A host the allowlist does not name, a port it does
not allow, or a name that resolves only to non-public addresses gets ``403``; a head the proxy cannot read gets
``400`` (``431`` when too large, ``408`` when it is not complete in time); the destination failing gets ``502``.
Every attempt that sent a byte is logged (`EgressEntry`), allowed or refused; `EgressProxy.close` returns the
session's log and removes its socket. Nothing a peer sends ends the proxy or another connection (`EgressLimits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from polar_cli.egress.policy import Allowlist, BadRequest, Target, address_refused, decide, parse_head
from polar_cli.runtime.base import socket_parent
from polar_cli.runtime.egress import EGRESS_SOCKET_NAME

log = logging.getLogger("polar.egress")

HEAD_END = b"\r\n\r\n"
REASONS = {200: "Connection established", 400: "Bad Request", 403: "Forbidden", 408: "Request Timeout"}
REASONS |= {431: "Request Header Fields Too Large", 502: "Bad Gateway", 503: "Service Unavailable"}

Resolve = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class EgressLimits:
    """What one peer may cost; over a limit it gets its error and the connection closes (docs/security.md)."""

    head_bytes: int = 16 * 1024
    head_lines: int = 100
    # the whole head must arrive within this (slow-loris)
    head_timeout: float = 20.0
    connect_timeout: float = 10.0
    # a tunnel or forwarded request with no byte either way for this long is closed
    idle_timeout: float = 300.0
    # open connections per session; more get 503
    max_connections: int = 256
    # log entries kept per session; later attempts are counted (`EgressLog.dropped`)
    max_entries: int = 2000


@dataclass(slots=True)
class EgressEntry:
    """One connection attempt: where to, what the proxy decided and answered, and what went through."""

    time: str
    host: str | None
    port: int | None
    method: str | None
    decision: str  # "allowed" | "refused"
    reason: str
    # the proxy's own answer (200 for a tunnel; None: a forwarded request, the destination answered)
    status: int | None = None
    bytes_up: int = 0
    bytes_down: int = 0
    seconds: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class EgressLog:
    entries: tuple[EgressEntry, ...]
    # attempts past `EgressLimits.max_entries`, not kept
    dropped: int = 0

    def to_rows(self) -> list[dict[str, Any]]:
        """What the corpus row's ``egress`` holds: every entry, and a last ``not logged`` one counting any dropped."""
        rows = [e.to_dict() for e in self.entries]
        if self.dropped:
            rows.append({"decision": "not logged", "count": self.dropped, "reason": "past the per-session cap"})
        return rows


async def resolve_host(host: str, port: int) -> list[str]:
    """The addresses a name resolves to on the proxy's host (an IP literal is itself)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(slots=True)
class _Session:
    rules: Allowlist
    directory: Path
    server: asyncio.AbstractServer | None = None
    entries: list[EgressEntry] = field(default_factory=list)
    dropped: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def record(self, entry: EgressEntry, limit: int) -> None:
        if len(self.entries) < limit:
            self.entries.append(entry)
        else:
            self.dropped += 1


class EgressProxy:
    """Per-session proxy sockets on the running event loop."""

    def __init__(self, limits: EgressLimits | None = None, resolve: Resolve = resolve_host) -> None:
        self.limits = limits or EgressLimits()
        self.resolve = resolve
        self._sessions: dict[str, _Session] = {}

    async def open(self, session_id: str, rules: Allowlist, parent: str | None = None) -> Path:
        """Listen for ``session_id`` on a socket of its own; returns its directory (holding only the socket)."""
        if session_id in self._sessions:
            raise ValueError(f"egress for session {session_id} is open already")
        directory = Path(tempfile.mkdtemp(prefix="polar-egress-", dir=parent or socket_parent()))
        directory.chmod(0o755)  # a sandbox's user (any uid) must traverse it
        session = _Session(rules, directory)
        self._sessions[session_id] = session
        try:
            session.server = await asyncio.start_unix_server(
                lambda r, w: self._accept(session, r, w), directory / EGRESS_SOCKET_NAME, limit=self.limits.head_bytes
            )
            (directory / EGRESS_SOCKET_NAME).chmod(0o777)  # connecting needs write permission on the socket
        except BaseException:
            await self.close(session_id)
            raise
        return directory

    def sessions(self) -> list[str]:
        return list(self._sessions)

    async def close(self, session_id: str) -> EgressLog:
        """Stop serving ``session_id``, end its open connections (logged), remove its socket; its log. A session
        that is not open has an empty log."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return EgressLog(())
        if session.server is not None:
            session.server.close()
        for task in list(session.tasks):
            task.cancel()
        if session.tasks:
            await asyncio.gather(*session.tasks, return_exceptions=True)
        shutil.rmtree(session.directory, ignore_errors=True)
        return EgressLog(tuple(session.entries), session.dropped)

    async def aclose(self) -> None:
        for session_id in self.sessions():
            await self.close(session_id)

    async def _accept(self, session: _Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            session.tasks.add(task)
            task.add_done_callback(session.tasks.discard)
        connection = _Connection(self, session, reader, writer)
        try:
            await connection.serve()
        except asyncio.CancelledError:
            connection.entry_error("the session ended")
        except Exception as exc:  # one connection's failure never reaches the server
            connection.entry_error(f"{type(exc).__name__}: {exc}")
        finally:
            connection.finish()


class _Connection:
    """One client connection: its head read and judged, then a tunnel or one forwarded request; its log entry."""

    def __init__(
        self, proxy: EgressProxy, session: _Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.limits = proxy.limits
        self.resolve = proxy.resolve
        self.session = session
        self.reader, self.writer = reader, writer
        self.upstream: asyncio.StreamWriter | None = None
        self.started = time.monotonic()
        self.last_activity = self.started
        self.when = datetime.now(UTC).isoformat(timespec="milliseconds")
        self.entry: EgressEntry | None = None

    def _log(self, target: Target | None, allowed: bool, reason: str, status: int | None = None) -> EgressEntry:
        host, port, method = (target.host, target.port, target.method) if target else (None, None, None)
        decision = "allowed" if allowed else "refused"
        self.entry = EgressEntry(self.when, host, port, method, decision, reason, status)
        return self.entry

    def entry_error(self, error: str) -> None:
        if self.entry is not None and self.entry.error is None:
            self.entry.error = error

    def finish(self) -> None:
        for writer in (self.upstream, self.writer):
            if writer is not None:
                writer.transport.abort()
        if self.entry is not None:
            self.entry.seconds = round(time.monotonic() - self.started, 3)
            self.session.record(self.entry, self.limits.max_entries)

    async def serve(self) -> None:
        # the head first, also past the cap (bounded by its size and time limits): a client that is still sending it
        # when the 503 comes and the connection closes would see a broken pipe, not the answer
        head = await self._read_head()
        if head is None:
            return
        if len(self.session.tasks) > self.limits.max_connections:
            self._log(None, False, "too many open connections", 503)
            await self._answer(503, "too many open connections")
            return
        try:
            target = parse_head(head)
        except BadRequest as exc:
            self._log(None, False, f"bad request: {exc.reason}", exc.status)
            await self._answer(exc.status, exc.reason)
            return
        decision = decide(target, self.session.rules)
        entry = self._log(target, decision.allowed, decision.reason)
        if not decision.allowed:
            entry.status = 403
            await self._answer(403, decision.reason)
            return
        upstream = await self._connect(target, entry)
        if upstream is None:
            return
        up_reader, self.upstream = upstream
        if target.forward is None:
            entry.status = 200
            self.writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            self.upstream.write(target.forward)
            entry.bytes_up += len(target.forward)
        await asyncio.gather(self._pump(self.reader, self.upstream, True), self._pump(up_reader, self.writer, False))

    async def _read_head(self) -> bytes | None:
        """The request head, or None after answering (or, for a connection that sent nothing, silently)."""
        status, reason = 400, ""
        try:
            head = await asyncio.wait_for(self.reader.readuntil(HEAD_END), self.limits.head_timeout)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:  # closed inside its head; a connection that sent nothing (a relay probe) is no attempt
                self._log(None, False, "bad request: the connection closed inside the request head")
            return None
        except (asyncio.LimitOverrunError, ValueError):
            status, reason = 431, f"the request head passed {self.limits.head_bytes} bytes"
        except TimeoutError:
            status, reason = 408, f"the request head was not complete within {self.limits.head_timeout:g} s"
        else:
            if head.count(b"\r\n") - 2 <= self.limits.head_lines:
                return head
            status, reason = 431, f"more than {self.limits.head_lines} header lines"
        self._log(None, False, f"bad request: {reason}", status)
        await self._answer(status, reason)
        return None

    async def _connect(
        self, target: Target, entry: EgressEntry
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        timeout = self.limits.connect_timeout
        try:
            addresses = await asyncio.wait_for(self.resolve(target.host, target.port), timeout)
        except (OSError, TimeoutError) as exc:
            await self._bad_gateway(entry, f"resolving {target.host}: {exc or 'timed out'}")
            return None
        refusals = [address_refused(a, self.session.rules) for a in addresses]
        reachable = [a for a, why in zip(addresses, refusals, strict=True) if why is None]
        if not reachable:
            entry.decision, entry.status = "refused", 403
            entry.reason = next((why for why in refusals if why), f"{target.host} has no address")
            await self._answer(403, entry.reason)
            return None
        error = ""
        for address in reachable:
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, target.port), timeout)
            except (OSError, TimeoutError) as exc:
                error = f"connecting to {address}:{target.port}: {exc or 'timed out'}"
        await self._bad_gateway(entry, error)
        return None

    async def _bad_gateway(self, entry: EgressEntry, error: str) -> None:
        entry.status, entry.error = 502, error
        await self._answer(502, error)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, up: bool) -> None:
        """Copy until EOF (passed on as a half-close) or an error (which ends both directions); a connection with no
        byte either way for `EgressLimits.idle_timeout` ends."""
        entry = self.entry
        try:
            while True:
                try:
                    data = await asyncio.wait_for(source.read(65536), self.limits.idle_timeout)
                except TimeoutError:
                    if time.monotonic() - self.last_activity < self.limits.idle_timeout:
                        continue
                    self.entry_error(f"idle for {self.limits.idle_timeout:g} s")
                    break
                if not data:
                    if sink.can_write_eof():
                        sink.write_eof()
                    return
                self.last_activity = time.monotonic()
                if entry is not None:
                    if up:
                        entry.bytes_up += len(data)
                    else:
                        entry.bytes_down += len(data)
                sink.write(data)
                await sink.drain()
        except (OSError, RuntimeError) as exc:
            self.entry_error(f"{'up' if up else 'down'}: {exc or type(exc).__name__}")
        for writer in (self.writer, self.upstream):
            if writer is not None:
                writer.transport.abort()

    async def _answer(self, status: int, reason: str) -> None:
        body = f"polar egress proxy: {reason}\n".encode("ascii", "replace")
        head = f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(self.writer.drain(), self.limits.head_timeout)

"""A small asyncio HTTP/1.1 client for the inference server: keep-alive pool, timeouts, errors mapped once.

httpx would do, but on the proxy's hot path its per-request overhead is several times the rest of the gateway's work;
this client is only what the gateway needs: JSON POST and GET to one origin, over the sans-IO `ResponseParser`.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from polar_cli.errors import UpstreamError, UpstreamProtocolError
from polar_cli.wire.http11 import NEED_DATA, Limits, Response, ResponseParser, encode_request

_READ_SIZE = 256 * 1024
# the one route the gateway calls on every inference server (SGLang, vLLM, the in-process engines)
UPSTREAM_PATH = "/v1/chat/completions"


def upstream_root(url: str) -> str:
    """The server root: users paste base URLs with or without the trailing /v1."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


class Upstream(Protocol):
    """What the gateway needs of an inference server: `UpstreamClient` over HTTP, `upstream_pool.UpstreamPool` over
    several servers (a session stays on one), or an in-process engine (gold).

    ``session`` names the gateway session a call is made for. A server over HTTP never sees it (it learns a session
    only from the prompt, like any model); an in-process scripted engine answers for the task bound to it.
    """

    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response: ...

    async def get(self, path: str) -> Response: ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class UpstreamClient:
    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 1800.0,
        connect_timeout: float = 10.0,
        api_key: str | None = None,
        max_idle: int = 512,
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"upstream URL must be http://host:port[/prefix], got {base_url!r}")
        self.base_url = base_url
        self._host = url.hostname
        self._port = url.port or 80
        self._host_header = url.netloc
        self._prefix = url.path.rstrip("/")
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._headers = [("authorization", f"Bearer {api_key}")] if api_key else []
        self._idle: list[_Connection] = []
        self._max_idle = max_idle
        self._limits = Limits(max_body_bytes=512 * 1024 * 1024)

    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
        return await self.request("POST", path, body, [("content-type", "application/json")])

    async def get(self, path: str) -> Response:
        return await self.request("GET", path, b"", [])

    async def request(self, method: str, path: str, body: bytes, headers: list[tuple[str, str]]) -> Response:
        """One exchange. A kept-alive connection the server closed meanwhile is retried once on a fresh one."""
        data = encode_request(method, self._prefix + path, self._host_header, body, self._headers + headers)
        while self._idle:
            conn = self._idle.pop()
            try:
                return await self._exchange(conn, data)
            except _StaleConnection:
                continue
        try:
            return await self._exchange(await self._connect(), data)
        except _StaleConnection as exc:
            raise UpstreamError(f"upstream {self.base_url} closed the connection without answering") from exc

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port, limit=_READ_SIZE), self._connect_timeout
            )
        except (TimeoutError, OSError) as exc:
            raise UpstreamError(f"upstream {self.base_url} unreachable: {exc or type(exc).__name__}") from exc
        return _Connection(reader, writer)

    async def _exchange(self, conn: _Connection, data: bytes) -> Response:
        parser = ResponseParser(self._limits)
        got_bytes = False
        try:
            conn.writer.write(data)
            async with asyncio.timeout(self._timeout):
                while True:
                    event = parser.next_event()
                    if event is not NEED_DATA:
                        break
                    chunk = await conn.reader.read(_READ_SIZE)
                    if not chunk and not got_bytes:
                        raise _StaleConnection
                    got_bytes = True
                    parser.receive_data(chunk)
        except _StaleConnection:
            conn.close()
            raise
        except TimeoutError as exc:
            conn.close()
            raise UpstreamError(
                f"upstream gave no answer within {self._timeout:g} s", status=504, kind="timeout"
            ) from exc
        except ConnectionResetError as exc:
            conn.close()
            if not got_bytes:
                raise _StaleConnection from exc
            raise UpstreamError(f"upstream closed the connection: {exc}") from exc
        except UpstreamProtocolError:
            conn.close()
            raise
        except OSError as exc:
            conn.close()
            raise UpstreamError(f"upstream exchange failed: {exc}") from exc
        except BaseException:
            conn.close()  # cancelled mid-exchange: the connection's state is unknown
            raise
        assert isinstance(event, Response)
        if event.keep_alive and len(self._idle) < self._max_idle:
            self._idle.append(conn)
        else:
            conn.close()
        return event

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


class _StaleConnection(Exception):
    """A pooled connection was closed by the server before it answered: safe to retry on a new one."""

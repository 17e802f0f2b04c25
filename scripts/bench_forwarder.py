"""The floor for `bench_proxy.py`: a bare asyncio forwarder that relays bytes to one upstream without parsing them.

Each connection accepted gets its own connection to the upstream; whatever one side sends is written to the other as
it arrives, in both directions, with no HTTP parsing, no JSON and no capture. What it reaches, measured beside the
proxy in one run against the same upstream, is what a Python asyncio process in the middle costs at the least: the
proxy's figure is read as a share of it.

    python scripts/bench_forwarder.py --upstream-port 8000 --port 8101
"""

from __future__ import annotations

import argparse
import asyncio


class _Pipe(asyncio.Protocol):
    """One side of a relayed connection: what it receives is written to its peer's transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.pending: list[bytes] = []  # bytes received before the peer's connection was up

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Client(_Pipe):
    """The accepted side: opens its own connection to the upstream, then relays."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__()
        self._upstream = (host, port)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_connection(_Pipe, *self._upstream)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        upstream.peer, self.peer = self, upstream
        assert upstream.transport is not None
        if self.transport is None:  # the client left while we connected
            upstream.transport.close()
            return
        for data in self.pending:
            upstream.transport.write(data)
        self.pending.clear()


async def serve(upstream_host: str, upstream_port: int, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(upstream_host, upstream_port), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-host", default="127.0.0.1")
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    asyncio.run(serve(args.upstream_host, args.upstream_port, args.port))


if __name__ == "__main__":
    main()

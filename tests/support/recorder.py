"""The gateway's test-only recording mode: every request a live harness sends, written as one JSONL line in the shape
of tests/data/harness_requests (and ../shared/harness_requests): ``harness``, ``run``, ``seq``, ``t``, ``method``,
``path``, ``query``, ``headers``, ``body``, ``api`` (the recorder's short label, `recordings.API_OF_LABEL`) and
``answered`` (what the gateway sent back: ``ok`` or ``HTTP <status>``).

`running_gateway(..., record=Recorder(...))` wraps the gateway's ``handle``, so what is written is exactly what
reached the gateway, from a real harness in a real container. The session key is replaced by a placeholder, as in
the stored recordings. What this cannot show: traffic the harness sends elsewhere (its side requests to other hosts
never reach the gateway: the stored recordings saw them through a proxy).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import orjson

from polar_cli.gateway.handler import Gateway, Reply
from polar_cli.translate.registry import route_for_path
from polar_cli.wire.http11 import Request
from tests.support.recordings import API_OF_LABEL

LABEL_OF_API = {api: label for label, api in API_OF_LABEL.items()}
KEY_PLACEHOLDER = "sk-polar-recorded"


@dataclass
class Recorder:
    path: Path
    harness: str
    run: str
    secrets: tuple[str, ...] = ()  # replaced by KEY_PLACEHOLDER wherever they appear
    _seq: int = 0
    _start: float = field(default_factory=time.monotonic)

    def attach(self, gateway: Gateway) -> None:
        inner = gateway.handle

        async def handle(request: Request, state: Any = None) -> Reply:
            reply = await inner(request, state)
            self.write(request, reply.status)
            return reply

        gateway.handle = handle  # type: ignore[method-assign]

    def write(self, request: Request, status: int) -> None:
        self._seq += 1
        route = route_for_path(request.path, request.query)
        try:
            body: Any = orjson.loads(request.body) if request.body else None
        except orjson.JSONDecodeError:
            body = request.body.decode("utf-8", "replace")
        line: dict[str, Any] = {
            "harness": self.harness,
            "run": self.run,
            "seq": self._seq,
            "t": round(time.monotonic() - self._start, 3),
            "method": request.method,
            "path": request.path,
            "query": {k: v[0] if len(v) == 1 else v for k, v in parse_qs(request.query).items()},
            "headers": dict(request.headers),
            "body": body,
            "answered": "ok" if status == 200 else f"HTTP {status}",
        }
        if route is not None:
            line["api"] = LABEL_OF_API[route.api]
        text = orjson.dumps(line).decode()
        for secret in self.secrets:
            text = text.replace(secret, KEY_PLACEHOLDER)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(text + "\n")

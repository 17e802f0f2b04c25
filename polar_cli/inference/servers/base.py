"""What a weight sync asks of an inference server (`ServerControl`), and what every server's control shares: the
checkpoint it loads, its error, the probe's ids, and the calls on the server's own control routes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

# a fixed probe: 24 ids any vocabulary of the models Polar serves holds (the first few hundred ids are bytes/merges)
PROBE_IDS: tuple[int, ...] = tuple(range(300, 324))
RELOAD_TIMEOUT = 600.0


class ReloadError(Exception):
    """An engine refused or failed a weight load, or its check."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    path: str
    """A directory of safetensors in the model's layout (or a LoRA adapter's directory, with ``lora``)."""
    version: str
    lora: str | None = None
    """The served name of the LoRA adapter to load in place (None: full weights)."""


class ServerControl(Protocol):
    """One kind of inference server's control routes, as its own documentation gives them."""

    name: str

    async def load(self, client: httpx.AsyncClient, url: str, checkpoint: Checkpoint) -> None:
        """Load ``checkpoint`` into the server at ``url`` and label it with its version."""
        ...

    async def served_version(self, client: httpx.AsyncClient, url: str) -> str | None:
        """The weight version the server says it serves (None: it has no such route, or says none)."""
        ...

    async def probe(
        self, client: httpx.AsyncClient, url: str, model: str, ids: Sequence[int] = PROBE_IDS
    ) -> list[float]:
        """The server's log-probability of each probe id after the ones before it (len(ids) - 1 values)."""
        ...


async def post(client: httpx.AsyncClient, url: str, body: Any = None, **params: str) -> Any:
    """POST to a control route: its JSON answer (or text); a refusal or a transport failure is a `ReloadError`."""
    try:
        reply = await client.post(url, json=body, params=params or None, timeout=RELOAD_TIMEOUT)
    except httpx.HTTPError as exc:
        raise ReloadError(f"POST {url}: {type(exc).__name__}: {exc}") from exc
    if reply.status_code >= 400:
        raise ReloadError(f"POST {url}: HTTP {reply.status_code}: {reply.text[:300]}")
    try:
        return reply.json()
    except ValueError:
        return reply.text


async def read_version(client: httpx.AsyncClient, url: str) -> str | None:
    """The ``weight_version`` (or ``version``) a server's info route at ``url`` answers; None when it answers none."""
    try:
        reply = await client.get(url, timeout=30)
        data = reply.json() if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    version = data.get("weight_version", data.get("version"))
    return str(version) if version is not None else None

"""A small typed client of `polar serve`, for trainers (httpx).

    from polar_cli.client import PolarClient

    with PolarClient("http://127.0.0.1:8200", token=None) as polar:
        polar.submit({"task_id": "step3-q17", "instance": {...}, "num_samples": 8, "harness": "codex"})
        for result in polar.iter_results(["step3-q17", ...], timeout=3600):
            rewards = [s["reward"] for s in result.sessions]

Every method raises `ServeError` (with the HTTP status, the error type and the field the service named) for an
answer that is not 2xx, and httpx's own errors for a service that cannot be reached. Results are plain JSON dicts
wrapped in `TaskResult` for the fields a trainer reads most.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

# the longest one long-poll asks the service to wait (the service allows an hour)
POLL_SECONDS = 60.0


class ServeError(Exception):
    def __init__(self, status: int, kind: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{status} {kind}: {message}")
        self.status, self.kind, self.message, self.field = status, kind, message, field


@dataclass(frozen=True, slots=True)
class TaskResult:
    """A task's result: ``raw`` is the whole JSON the service answered."""

    raw: dict[str, Any]

    @property
    def task_id(self) -> str:
        return str(self.raw["task_id"])

    @property
    def state(self) -> str:
        return str(self.raw["state"])

    @property
    def done(self) -> bool:
        return bool(self.raw["done"])

    @property
    def sessions(self) -> list[dict[str, Any]]:
        """The group, by sample index (finished samples only while the task runs)."""
        return list(self.raw.get("sessions") or [])

    @property
    def rewards(self) -> list[float | None]:
        """Each session's reward; None for a masked one ("no reward": leave it out of the group's baseline)."""
        return [None if s["reward"] is None else float(s["reward"]) for s in self.sessions]

    @property
    def mean_reward(self) -> float | None:
        value = self.raw.get("mean_reward")
        return None if value is None else float(value)

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self.raw.get("metadata") or {})


class PolarClient:
    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, trust_env=False)

    def __enter__(self) -> PolarClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        timeout: float | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        response = self._http.request(method, path, json=json, params=params, **extra)
        try:
            payload = response.json()
        except ValueError:
            payload = {}
        if not response.is_success:
            err = payload.get("error") if isinstance(payload, dict) else None
            err = err if isinstance(err, dict) else {}
            raise ServeError(
                response.status_code,
                str(err.get("type") or "error"),
                str(err.get("message") or response.text[:500]),
                err.get("field"),
            )
        return payload if isinstance(payload, dict) else {"value": payload}

    # ---- tasks -------------------------------------------------------------------------------------------------

    def submit(self, task: Mapping[str, Any]) -> dict[str, Any]:
        """Submit a TaskRequest (a dict of its fields); returns its status (``created`` False for a resubmit)."""
        return self._call("POST", "/v1/tasks", json=dict(task))

    def get(self, task_id: str) -> TaskResult:
        return TaskResult(self._call("GET", f"/v1/tasks/{task_id}"))

    def wait(self, task_id: str, timeout: float | None = None) -> TaskResult:
        """The task's result once it is done (long-polls; `TimeoutError` after ``timeout`` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, deadline - time.monotonic())
            if left <= 0:
                raise TimeoutError(f"task {task_id} not done within {timeout:g} s")
            raw = self._call("GET", f"/v1/tasks/{task_id}/results", params={"wait": f"{left:.3f}"}, timeout=left + 30)
            if raw.get("done"):
                return TaskResult(raw)

    def iter_results(self, task_ids: Iterable[str], timeout: float | None = None) -> Iterator[TaskResult]:
        """Each task's result as it is done, in the order they finish (polled one by one, briefly)."""
        open_ids = list(dict.fromkeys(task_ids))
        deadline = None if timeout is None else time.monotonic() + timeout
        while open_ids:
            for task_id in list(open_ids):
                raw = self._call("GET", f"/v1/tasks/{task_id}/results", params={"wait": "0"})
                if raw.get("done"):
                    open_ids.remove(task_id)
                    yield TaskResult(raw)
            if open_ids:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{len(open_ids)} task(s) not done within {timeout:g} s: {open_ids[:5]}")
                # wait on the first one left, briefly: one long-poll instead of a busy loop
                raw = self._call("GET", f"/v1/tasks/{open_ids[0]}/results", params={"wait": "2"}, timeout=35)
                if raw.get("done"):
                    open_ids.remove(open_ids[0])
                    yield TaskResult(raw)

    def finished(self, after: int = 0, wait: float = 30.0, limit: int = 16) -> tuple[list[TaskResult], int]:
        """Tasks finished after cursor ``after``, whichever they are (waiting up to ``wait`` s), and the next cursor."""
        params = {"after": str(after), "wait": f"{wait:.3f}", "limit": str(limit)}
        raw = self._call("GET", "/v1/results", params=params, timeout=wait + 30)
        return [TaskResult(t) for t in raw["tasks"]], int(raw["cursor"])

    def engines(self) -> list[dict[str, Any]]:
        """The engines the service drives: URL, kind, model, the weight version each serves, in rotation or not."""
        return list(self._call("GET", "/v1/engines")["engines"])

    def cancel(self, task_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/tasks/{task_id}")

    def tasks(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/tasks")["tasks"])

    # ---- the service -----------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/v1/status")

    def pause(self, mode: str = "drain", timeout: float = 600.0) -> dict[str, Any]:
        """Hold every model call (weight sync): ``drain`` waits for those in flight, ``abort`` cancels and replays."""
        return self._call("POST", "/v1/admin/pause", params={"mode": mode}, timeout=timeout)

    def resume(self) -> dict[str, Any]:
        return self._call("POST", "/v1/admin/resume")

    def set_weights(
        self,
        version: str,
        weights_path: str | None = None,
        *,
        lora: str | None = None,
        mode: str = "drain",
        verify: bool = True,
        expect_probe: list[float] | None = None,
        timeout: float = 900.0,
    ) -> dict[str, Any]:
        """Stamp ``version`` on every capture record and trajectory produced from now on; with ``weights_path``,
        first load that checkpoint into every engine server (paused, checked; `serve.weights`): the report per
        engine (probe before and after, the version it serves, seconds), or a `ServeError` 502 when none loaded it."""
        body: dict[str, Any] = {"weight_version": version}
        if weights_path is not None:
            body |= {"weights_path": weights_path, "lora": lora, "mode": mode, "verify": verify}
            body |= {"expect_probe": expect_probe} if expect_probe is not None else {}
        return self._call("POST", "/v1/admin/weights", json=body, timeout=timeout)

    def health(self) -> bool:
        try:
            return self._http.get("/health").is_success
        except httpx.HTTPError:
            return False

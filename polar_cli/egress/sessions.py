"""The egress proxy's life in a run: a session with an allowlist gets its socket at INIT, its log at POSTRUN.

`SessionEgress.open` takes the recipe's allowlist and a task's own hosts (`policy.merged`: the hook a task kind
calls with the host patterns its task names) and returns the session's spec wired to a socket of its own, or the
spec unchanged when nothing is allowed (the sandbox stays gateway-only without a proxy). `close` ends the session's
proxy, writes its log into the session's artifacts (``egress.jsonl``) and returns what the row's ``egress`` holds.
Both run on the node's event loop.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from polar_cli.egress.policy import Allowlist, merged
from polar_cli.egress.proxy import EgressProxy
from polar_cli.errors import RuntimeFailure
from polar_cli.harness.session import SessionSpec

log = logging.getLogger("polar.egress")
LOG_FILE = "egress.jsonl"
# what a row's ``egress`` holds: one dict per connection attempt (`proxy.EgressLog.to_rows`)
EgressRows = list[dict[str, Any]]


class SessionEgress:
    def __init__(self, rules: Allowlist | None, proxy: EgressProxy | None = None) -> None:
        self.rules = rules
        self.proxy = proxy or EgressProxy()

    async def open(self, spec: SessionSpec, task_hosts: Sequence[str] = ()) -> SessionSpec:
        """``spec`` with its session's proxy socket when the recipe or the task allows a host; else ``spec``."""
        rules = merged(self.rules, task_hosts)
        if rules is None:
            return spec
        if not spec.gateway_only:
            raise RuntimeFailure("an egress allowlist needs runtime.network gateway-only")
        directory = await self.proxy.open(spec.session_id, rules)
        return dataclasses.replace(spec, egress_socket=str(directory))

    async def close(self, session_id: str, artifacts_dir: Path | None = None) -> EgressRows | None:
        """The session's log as the row holds it (None: it had no proxy), also written into ``artifacts_dir``."""
        if session_id not in self.proxy.sessions():
            return None
        rows = (await self.proxy.close(session_id)).to_rows()
        if artifacts_dir is not None:
            try:
                artifacts_dir.mkdir(parents=True, exist_ok=True)
                text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
                (artifacts_dir / LOG_FILE).write_text(text, encoding="utf-8")
            except OSError as exc:
                log.warning("session %s: writing its egress log failed: %s", session_id, exc)
        return rows

    async def aclose(self) -> None:
        await self.proxy.aclose()

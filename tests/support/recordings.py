"""The real harness traffic recorded in tests/data/harness_requests (docs/harnesses.md "Recorded traffic")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from polar_cli.translate.codec import ApiName

RECORDINGS = Path(__file__).parents[1] / "data" / "harness_requests"
# the recordings label each call with the recorder's own short name of its API; Polar names APIs by codec module
API_OF_LABEL: dict[str, ApiName] = {
    "anthropic": "anthropic_messages",
    "chat": "openai_chat",
    "responses": "openai_responses",
    "gemini": "google_genai",
}


def recorded(api: ApiName | None = None, directory: Path = RECORDINGS) -> list[dict[str, Any]]:
    """Every recorded model call (lines with an ``api`` label) in ``directory``, or only those of one API."""
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("api") and (api is None or API_OF_LABEL[record["api"]] == api):
                out.append(record)
    return out


def find_body(records: list[dict[str, Any]], harness: str, run: str, seq: int) -> dict[str, Any]:
    for record in records:
        if (record["harness"], record["run"], record["seq"]) == (harness, run, seq):
            body: dict[str, Any] = record["body"]
            return body
    raise LookupError(f"no recording {harness}/{run}/{seq}")

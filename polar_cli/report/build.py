"""`build_report`: a run directory to RUN_DIR/report/, a static site that needs no network to view.

    report/
      index.html            the figures, the charts and the session table (its data inside the page)
      sessions/<page>.html  one trajectory viewer per session (its rows inside the page)
      vocab.js              id -> token text for every id the pages show, when the run's tokenizer is here
      assets/               report.css, report.js, viewer.js (copied from this package)

Every file is written whole and renamed into place, so a browser refreshing during a rebuild (`polar view`,
`polar generate --report-every`) sees the old page or the new one. A viewer page is rewritten only when its session
changed (its rows' size), so refreshing a long run costs the new sessions, not all of them.
"""

from __future__ import annotations

import html
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from polar_cli.generate.state import RUN
from polar_cli.report.data import figures, iter_sessions, read_log, session_summary
from polar_cli.report.session import Session, read_json
from polar_cli.report.vocab import Decoder, tokenizer_dir

ASSETS = Path(__file__).with_name("assets")
REPORT = "report"


@dataclass(frozen=True, slots=True)
class Built:
    index: Path
    sessions: int
    pages_written: int
    seconds: float
    tokenizer: str


def _json(value: Any) -> str:
    # inside <script type="application/json">: only "</" could end the element early
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode().replace("</", "<\\/")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def page(title: str, data: Any, script: str, root: str, *, refresh: bool = False) -> str:
    extra = f'<script src="{root}vocab.js"></script>' if script == "viewer.js" else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        f'<link rel=stylesheet href="{root}assets/report.css"></head><body>'
        f'<div id=app data-refresh="{int(refresh)}"></div>'
        f'<script type="application/json" id=data>{_json(data)}</script>{extra}'
        f'<script src="{root}assets/{script}"></script></body></html>\n'
    )


def _rounded(values: list[float]) -> list[float]:
    """Logprobs to 4 decimals (a third of the bytes): numpy's round over the whole array, a Python loop without."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - transformers brings numpy
        return [round(v, 4) for v in values]
    return list(np.round(np.asarray(values, dtype=np.float64), 4).tolist()) if values else []


def viewer_data(session: Session, run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """Everything one viewer page shows: the session's fields, each trace's conversation and tokens, the verdict."""
    head = session.head
    traces: list[dict[str, Any]] = []
    for row in session.traces():
        t = row["trace"]
        tools = row.get("tools")
        if isinstance(tools, str):
            try:
                tools = orjson.loads(tools)
            except orjson.JSONDecodeError:
                tools = []
        traces.append(
            {
                "index": row.get("trace_index", len(traces)),
                "lineage": row.get("lineage") or (t.get("metadata") or {}).get("lineage"),
                "messages": row.get("messages") or [],
                "tools": [
                    ((x.get("function") or x).get("name") if isinstance(x, dict) else str(x)) for x in tools or ()
                ],
                "seqs": t.get("seqs") or [],
                "prompt_ids": t.get("prompt_ids") or [],
                "response_ids": t.get("response_ids") or [],
                "loss_mask": t.get("loss_mask") or [],
                "logprobs": _rounded(t.get("response_logprobs") or []),
                "finish_reason": t.get("finish_reason"),
                "metadata": {k: v for k, v in (t.get("metadata") or {}).items() if k != "lineage"},
            }
        )
    drop = {"messages", "trace", "traces", "tools", "lineage", "trace_index", "eval"}
    return {
        "summary": summary,
        "session": {k: v for k, v in head.items() if k not in drop},
        "rows": len(session.rows),
        "expected_traces": head.get("trace_count"),
        "traces": traces,
        "eval": head.get("eval"),
        "log": read_log(run_dir, head.get("eval")),
    }


def build_report(
    run_dir: Path, out: Path | None = None, *, only: Session | None = None, refresh: bool = False
) -> Built:
    """Write the report of ``run_dir`` (a run directory or a serve state directory) into ``out`` (RUN_DIR/report).

    ``only``: write that session's viewer page and nothing else (`polar report --session`). ``refresh``: the pages
    reload themselves (what `polar view` serves)."""
    started = time.monotonic()
    out = out or run_dir / REPORT
    (out / "sessions").mkdir(parents=True, exist_ok=True)
    (out / "assets").mkdir(exist_ok=True)
    for asset in ASSETS.iterdir():
        if asset.is_file():
            shutil.copyfile(asset, out / "assets" / asset.name)
    run = read_json(run_dir / RUN) or {}
    directory, why = tokenizer_dir(run)
    decoder = Decoder(directory, why)
    vocab_before = len(_read_vocab(out)) if decoder.available else 0
    if decoder.available:
        decoder.pieces.update({int(k): v for k, v in _read_vocab(out).items()})
    summaries: list[dict[str, Any]] = []
    written = 0
    stamps = _read_stamps(out)
    for session in [only] if only is not None else iter_sessions(run_dir):
        summary = session_summary(session)
        summaries.append(summary)
        stamp = _stamp(session)
        if only is None and stamps.get(summary["page"]) == stamp and (out / "sessions" / summary["page"]).exists():
            continue
        stamps[summary["page"]] = stamp
        data = viewer_data(session, run_dir, summary)
        for trace in data["traces"]:
            decoder.add(trace["prompt_ids"])
            decoder.add(trace["response_ids"])
        data["tokenizer"] = decoder.name if decoder.available else None
        data["tokenizer_note"] = None if decoder.available else why
        title = f"{summary['id']}: {summary['status']}"
        _write(out / "sessions" / summary["page"], page(title, data, "viewer.js", "../", refresh=refresh))
        written += 1
    if decoder.available and (len(decoder.pieces) != vocab_before or not (out / "vocab.js").exists()):
        _write(out / "vocab.js", f"window.POLAR_VOCAB={_json(decoder.table())};\n")
    elif not decoder.available and not (out / "vocab.js").exists():
        _write(out / "vocab.js", "window.POLAR_VOCAB=null;\n")
    index = out / "index.html"
    if only is None:
        _write(out / ".stamps.json", _json(stamps))
        data = {"figures": figures(run_dir), "sessions": summaries, "tokenizer": decoder.name}
        _write(index, page(f"polar report: {data['figures'].get('name')}", data, "report.js", "", refresh=refresh))
    return Built(index, len(summaries), written, time.monotonic() - started, decoder.name)


def _stamp(session: Session) -> str:
    head = session.head
    return f"{session.kind}:{len(session.rows)}:{head.get('finished_at')}:{head.get('trace_count')}"


def _read_stamps(out: Path) -> dict[str, str]:
    return {str(k): str(v) for k, v in (read_json(out / ".stamps.json") or {}).items()}


def _read_vocab(out: Path) -> dict[str, str]:
    try:
        text = (out / "vocab.js").read_text(encoding="utf-8")
    except OSError:
        return {}
    body = text.removeprefix("window.POLAR_VOCAB=").rstrip().removesuffix(";")
    try:
        value = orjson.loads(body.replace("<\\/", "</"))
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}

"""The report at scale: build time and size for a run of N made-up sessions, and the index's load time in Chromium.

    .venv/bin/python scripts/bench_report.py [--sessions 1000] [--size 1024] [--out DIR]

``--size``: prompt ids per trace (a sampled turn is a quarter of it; sessions have one to three traces). The run is
written by the real writer (`tests/support/synth_run.py`); the tokenizer (qwen3) decodes ids only if cached here.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polar_cli.report import build_report
from tests.support.synth_run import write_run


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def load_seconds(index: Path, chromium: str) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        started = time.monotonic()
        page.goto(index.as_uri(), wait_until="load")
        page.wait_for_selector("#rows tr")
        loaded = time.monotonic() - started
        nav = page.evaluate("JSON.stringify(performance.getEntriesByType('navigation')[0])")
        started = time.monotonic()
        page.goto(index.parent.joinpath("sessions").iterdir().__next__().as_uri(), wait_until="load")
        page.wait_for_selector("#trained")
        viewer = time.monotonic() - started
        browser.close()
    timing = json.loads(nav)
    return {"index_s": round(loaded, 3), "index_dom_s": round(timing["domContentLoadedEventEnd"] / 1000, 3),
            "viewer_s": round(viewer, 3)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="polar-bench-report-"))
    run = root / "run"
    shutil.rmtree(run, ignore_errors=True)
    started = time.monotonic()
    write_run(run, args.sessions, size=args.size)
    written = time.monotonic() - started
    cpu = time.process_time()
    cold = build_report(run)
    cpu = time.process_time() - cpu
    warm = build_report(run)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    result = {
        "sessions": cold.sessions,
        "run_mb": round(
            sum((run / f).stat().st_size for f in ("corpus.jsonl", "rejects.jsonl", "errors.jsonl")) / 1e6, 1
        ),
        "write_run_s": round(written, 2),
        "build_s": round(cold.seconds, 2),
        "build_cpu_s": round(cpu, 2),  # the build's own CPU time: its wall time on an idle core
        "rebuild_unchanged_s": round(warm.seconds, 2),
        "report_mb": round(size_of(run / "report") / 1e6, 1),
        "index_mb": round((run / "report" / "index.html").stat().st_size / 1e6, 2),
        "tokenizer": cold.tokenizer,
        **(load_seconds(cold.index, chromium) if chromium else {"load": "no chromium"}),
    }
    print(json.dumps(result))
    if args.out is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()

"""The live report: rebuilt every N sessions during a run, and served by `polar view` with rebuilds on change."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from polar_cli.report.live import Refresher, view
from tests.support.synth_run import write_run


def test_the_refresher_rebuilds_every_n_sessions_and_at_the_end(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", 6, finish=False)
    refresher = Refresher(run, 3)
    refresher.start()
    for _ in range(7):
        refresher("accepted", {})
    refresher.close()
    assert refresher.rebuilder.builds >= 2  # at start, after 3 and 6 (coalesced when one is under way), at the end
    assert (run / "report" / "index.html").exists()


def test_view_serves_on_loopback_and_rebuilds_when_the_run_grows(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", 4, finish=False)
    urls: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(
        target=view, kwargs=dict(run_dir=run, host="127.0.0.1", port=0, interval=0.1, ready=urls.append, stop=stop)
    )
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not urls and time.monotonic() < deadline:
            time.sleep(0.05)
        assert urls and urls[0].startswith("http://127.0.0.1:")
        first = httpx.get(urls[0] + "index.html")
        assert first.status_code == 200 and 'data-refresh="1"' in first.text
        write_run(run, 9, seed=1, finish=True)  # the same sessions' keys are done: 5 more
        while time.monotonic() < deadline:
            page = httpx.get(urls[0] + "index.html").text
            if '"attempts":' in page and page != first.text and page.count('"page":') >= 9:
                break
            time.sleep(0.2)
        assert page.count('"page":') >= 9
    finally:
        stop.set()
        thread.join(30)

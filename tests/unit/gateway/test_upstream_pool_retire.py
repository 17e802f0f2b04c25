"""A worker taken out of rotation (a weight load failed on it) gets no new session, and its sessions move."""

from __future__ import annotations

from polar_cli.gateway.upstream_pool import UpstreamPool


def test_a_retired_worker_gets_no_session_and_its_sessions_move() -> None:
    pool = UpstreamPool(["http://127.0.0.1:1", "http://127.0.0.1:2"])
    first = pool._worker("s1").url
    assert first == "http://127.0.0.1:1"
    pool.retire(first, "reload_weights failed")
    assert pool._worker("s1").url == "http://127.0.0.1:2"  # moved at its next call
    assert all(pool._worker(f"n{i}").url == "http://127.0.0.1:2" for i in range(3))
    assert pool.workers[0].sessions == 0 and pool.workers[1].sessions == 4

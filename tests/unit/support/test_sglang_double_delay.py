"""The SGLang double as a slow server: ``delay`` holds each chat answer, delayed calls overlap and are counted."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.support.sglang_double import SGLangDouble

BODY = {"model": "polar-test-model", "messages": [{"role": "user", "content": "hi"}]}


def chat(url: str) -> tuple[int, float]:
    started = time.perf_counter()
    response = httpx.post(url + "/v1/chat/completions", json=BODY, timeout=10)
    return response.status_code, time.perf_counter() - started


def test_delayed_answers_overlap_and_the_peak_is_counted() -> None:
    with SGLangDouble(template=None, delay=0.5) as up:
        started = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(chat, [up.url] * 4))
        wall = time.perf_counter() - started
        assert up.in_flight == 0
        assert up.peak_in_flight == 4
    assert all(status == 200 and latency >= 0.5 for status, latency in answers)
    assert wall < 1.5  # four 0.5 s calls at once, not one after another (2 s)


def test_no_delay_by_default_and_the_delay_can_change_while_running() -> None:
    with SGLangDouble(template=None) as up:
        chat(up.url)  # the first call pays for pydantic's warm-up
        status, fast = chat(up.url)
        up.delay = 0.3
        _, slow = chat(up.url)
        # non-chat routes are never delayed
        started = time.perf_counter()
        assert httpx.get(up.url + "/health", timeout=5).status_code == 200
        health = time.perf_counter() - started
    assert status == 200 and fast < 0.3 <= slow
    assert health < 0.3

"""`polar serve` reads manifests off the event loop and keeps a bounded number of versions (issue 23 #12): before,
a 99 MB manifest stalled every request for 2 s, and every version of every manifest stayed in memory."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import pytest

from polar_cli.serve import tasks as tasks_module
from polar_cli.serve.models import TaskRequest
from polar_cli.serve.tasks import Manifests, TaskError


def manifest(path: Path, *ids: str) -> Path:
    rows = [
        {"instance_id": i, "repo": "o/r", "base_commit": "a" * 40, "problem_statement": "p", "patch": "x",
         "test_patch": "y", "FAIL_TO_PASS": ["t"], "PASS_TO_PASS": [], "image": "img"}
        for i in ids
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def request(path: Path, instance_id: str) -> TaskRequest:
    body = {"task_id": "t", "instance": {"manifest": str(path), "instance_id": instance_id}, "harness": "pi"}
    return TaskRequest.model_validate(body)


def test_a_manifest_is_read_in_a_worker_thread_while_the_loop_keeps_turning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = manifest(tmp_path / "m.jsonl", "a", "b")
    real = tasks_module.load_manifest
    threads: list[str] = []
    release = threading.Event()

    def slow(source: str) -> object:
        threads.append(threading.current_thread().name)
        release.wait(5)
        return real(source)

    monkeypatch.setattr(tasks_module, "load_manifest", slow)
    manifests = Manifests()

    async def main() -> int:
        ticks = 0
        # two tasks naming one manifest share one read
        loads = asyncio.gather(manifests.preload(request(path, "a")), manifests.preload(request(path, "b")))
        while not threads:
            await asyncio.sleep(0.01)
        for _ in range(5):  # the loop turns while the manifest is read
            await asyncio.sleep(0.01)
            ticks += 1
        release.set()
        await loads
        return ticks

    assert asyncio.run(main()) == 5
    assert threads and threads[0] != threading.main_thread().name and len(threads) == 1
    monkeypatch.setattr(tasks_module, "load_manifest", lambda source: pytest.fail("read again"))
    assert manifests.instance(request(path, "b").instance).instance_id == "b"  # type: ignore[arg-type]


def test_only_a_few_versions_are_kept_and_a_files_old_version_goes_when_it_changes(tmp_path: Path) -> None:
    manifests = Manifests(versions=2)
    paths = [manifest(tmp_path / f"m{i}.jsonl", f"i{i}") for i in range(3)]
    for i, path in enumerate(paths):
        asyncio.run(manifests.preload(request(path, f"i{i}")))
    assert [Path(k[0]).name for k in manifests.cached()] == ["m1.jsonl", "m2.jsonl"]
    manifest(paths[2], "i2", "new")
    os.utime(paths[2], (1, 1))  # another version of the same file
    assert manifests.instance(request(paths[2], "new").instance).instance_id == "new"  # type: ignore[arg-type]
    assert [Path(k[0]).name for k in manifests.cached()] == ["m1.jsonl", "m2.jsonl"]
    assert len([k for k in manifests.cached() if k[0].endswith("m2.jsonl")]) == 1


def test_a_manifest_that_fails_to_load_is_reported_by_resolve(tmp_path: Path) -> None:
    manifests = Manifests()
    missing = request(tmp_path / "nope.jsonl", "a")
    asyncio.run(manifests.preload(missing))  # does not raise: resolve names the field
    with pytest.raises(TaskError, match=r"instance\.manifest"):
        manifests.instance(missing.instance)  # type: ignore[arg-type]

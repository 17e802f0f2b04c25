"""Faults injected into a real `polar generate` run (real harness, real containers, real grading, the demo set):
the inference server dies under the run. A launched server is restarted and the run goes on; a server given by URL
is waited for; one that never comes back ends the run with exit 1 and one clear line, and the rerun finishes.

Each asserts what a night on a GPU box needs: no duplicate or torn row, no row lost, no reject caused by the fault
(the sessions it cut short are errors, run again), no container left, every key finished in the end.

The server is `tests.support.gold_server`: the gold engine in a process of its own that answers like SGLang, which
the tests kill with SIGKILL. What it cannot show: how a real SGLang dies on a GPU (NCCL hangs, CUDA errors); a hang
is covered by the watch's check timeout, not exercised here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from polar_cli.runtime.base import MANAGED_LABEL, OWNER_LABEL
from polar_cli.runtime.docker import connect

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "recipes" / "demo" / "instances.jsonl"
INSTANCES = 4
TIMEOUT = 900
FAST_WATCH = {"health_interval": 0.5, "health_failures": 2, "health_timeout": 5.0, "restart_backoff": 0.5}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_argv(pid_file: Path) -> list[str]:
    return [sys.executable, "-m", "tests.support.gold_server", "--manifest", str(MANIFEST), "--pid-file", str(pid_file)]


def write_recipe(tmp_path: Path, engine: dict[str, Any]) -> Path:
    recipe = {
        "name": "faults",
        "manifest": {"source": str(MANIFEST), "limit": INSTANCES},
        "harnesses": ["pi"],
        "instruction": "The repository {repo} is checked out in {workdir}. Fix the following issue there.\n\n"
        "{problem_statement}",
        "engine": {"tokenizer": "qwen3", "token_in": True, **FAST_WATCH, **engine},
        "runtime": {"min_free_gb": 0},  # the default network: gateway-only
        "concurrency": {"init": 2, "run": 2, "postrun": 2, "ready": 2},
        "timeouts": {"session": 600, "eval": 600},
        "output": {"formats": ["jsonl"]},
    }
    path = tmp_path / "recipe.json"  # JSON is YAML
    path.write_text(json.dumps(recipe))
    return path


def start_generate(recipe: Path, out: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "polar_cli", "generate", str(recipe), "--out", str(out), "--no-progress", "--json"]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def start_server(port: int, pid_file: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [*server_argv(pid_file), "--model-path", "polar-gold", "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the gold server did not start"
            time.sleep(0.2)


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = path.read_bytes()
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines()]


def wait_for_calls(proc: subprocess.Popen[bytes], out: Path) -> None:
    """Until a session has called the model and no session has finished: sessions are in flight."""
    deadline = time.monotonic() + TIMEOUT
    while not any(p.stat().st_size for p in (out / "capture").glob("*.jsonl")):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no model call was made"
        time.sleep(0.05)


def kill_pid_file(pid_file: Path) -> int:
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGKILL)
    return pid


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, dict[str, Any], str]:
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    summary = json.loads(stdout) if proc.returncode == 0 else {}
    return proc.returncode, summary, stderr.decode(errors="replace")


def assert_nothing_lost_nothing_rejected(out: Path) -> None:
    corpus, rejects = lines(out / "corpus.jsonl"), lines(out / "rejects.jsonl")
    assert rejects == [], [r["reason"] for r in rejects]
    keys = [r["key"] for r in corpus]
    assert len(keys) == len(set(keys)) == INSTANCES, keys
    assert all(r["accepted"] and r["reward"] == 1.0 for r in corpus)
    for error in lines(out / "errors.jsonl"):  # what the fault cut short: errors, never verdicts
        assert error["accepted"] is False and error["reason"].split(":")[0] in ("run_error", "upstream_error"), error


def assert_no_container_of(pid: int) -> None:
    client = connect()
    owned = client.api.containers(all=True, filters={"label": f"{MANAGED_LABEL}=1"})
    assert not [c for c in owned if f":{pid}:" in (c.get("Labels") or {}).get(OWNER_LABEL, "")]


def kill_containers_of(pid: int) -> int:
    """What a daemon restart does to a run's containers: they stop (they stay, until someone removes them)."""
    client = connect()
    owned = client.api.containers(filters={"label": f"{MANAGED_LABEL}=1"})
    mine = [c for c in owned if f":{pid}:" in (c.get("Labels") or {}).get(OWNER_LABEL, "")]
    for c in mine:
        client.api.kill(c["Id"])
    return len(mine)


def test_a_launched_server_that_dies_is_restarted_and_the_run_goes_on(tmp_path: Path) -> None:
    pid_file = tmp_path / "server.pid"
    engine = {"kind": "sglang", "sglang": {"model_path": "polar-gold", "launcher": server_argv(pid_file)}}
    out = tmp_path / "run"
    proc = start_generate(write_recipe(tmp_path, engine), out)
    wait_for_calls(proc, out)
    first = kill_pid_file(pid_file)
    code, summary, stderr = finish(proc)
    assert code == 0, stderr[-5000:]
    assert int(pid_file.read_text()) != first, "the server was not started again"
    assert summary["accepted"] == summary["attempts"] == INSTANCES and summary["pending"] == 0
    (outage,) = summary["outages"]
    assert outage["dependency"] == "the inference server" and str(outage["recovered_by"]).startswith("restarted")
    assert "exited with -9" in str(outage["reason"])
    assert_nothing_lost_nothing_rejected(out)
    assert_no_container_of(proc.pid)
    assert (out / "logs" / "sglang.log").read_text().count("=== polar: starting") == 2


def test_a_server_by_url_is_waited_for_while_it_is_down(tmp_path: Path) -> None:
    port, pid_file, log = free_port(), tmp_path / "server.pid", tmp_path / "server.log"
    server = start_server(port, pid_file, log)
    engine = {"kind": "sglang", "url": f"http://127.0.0.1:{port}", "down_timeout": 300}
    out = tmp_path / "run"
    proc = start_generate(write_recipe(tmp_path, engine), out)
    try:
        wait_for_calls(proc, out)
        kill_pid_file(pid_file)
        server.wait()
        time.sleep(5)  # down for longer than the watch needs to notice
        server = start_server(port, pid_file, log)
        code, summary, stderr = finish(proc)
    finally:
        server.kill()
    assert code == 0, stderr[-5000:]
    (outage,) = summary["outages"]
    assert str(outage["recovered_by"]).startswith("answering again")
    assert summary["accepted"] == INSTANCES
    assert_nothing_lost_nothing_rejected(out)
    assert_no_container_of(proc.pid)


def test_a_server_that_never_comes_back_ends_the_run_with_one_line_and_the_rerun_finishes(tmp_path: Path) -> None:
    port, pid_file, log = free_port(), tmp_path / "server.pid", tmp_path / "server.log"
    server = start_server(port, pid_file, log)
    engine = {"kind": "sglang", "url": f"http://127.0.0.1:{port}", "down_timeout": 5}
    recipe, out = write_recipe(tmp_path, engine), tmp_path / "run"
    proc = start_generate(recipe, out)
    wait_for_calls(proc, out)
    kill_pid_file(pid_file)
    server.wait()
    started = time.monotonic()
    code, _summary, stderr = finish(proc)
    assert code == 1, stderr[-5000:]
    assert time.monotonic() - started < 120, "the run must give up soon after down_timeout"
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "did not come back within 5 s" in errors[0], stderr[-3000:]
    assert lines(out / "rejects.jsonl") == []
    before = (out / "corpus.jsonl").read_bytes() if (out / "corpus.jsonl").exists() else b""
    assert json.loads((out / "summary.json").read_text())["outages"], "the summary records the outage"
    assert_no_container_of(proc.pid)

    server = start_server(port, pid_file, log)
    try:
        code, summary, stderr = finish(start_generate(recipe, out))
    finally:
        server.kill()
    assert code == 0, stderr[-5000:]
    assert (out / "corpus.jsonl").read_bytes().startswith(before), "a row written before the outage changed"
    assert summary["accepted"] == INSTANCES and summary["pending"] == 0
    assert_nothing_lost_nothing_rejected(out)


def test_docker_dying_mid_run_ends_sessions_as_errors_and_the_run_goes_on_when_it_is_back(tmp_path: Path) -> None:
    """The Docker engine, seen through `tests.support.docker_proxy`, goes away for ~10 s while sessions run (and the
    run's containers are killed, as a daemon restart would): the run waits, removes what the outage left, runs the
    cut sessions again and finishes every key."""
    from tests.support.docker_proxy import DockerProxy

    recipe = write_recipe(tmp_path, {"kind": "gold"})
    out = tmp_path / "run"
    with DockerProxy(tmp_path / "docker.sock") as proxy:
        argv = [
            sys.executable,
            "-m",
            "polar_cli",
            "generate",
            str(recipe),
            "--out",
            str(out),
            "--no-progress",
            "--json",
        ]
        env = {**os.environ, "DOCKER_HOST": proxy.url}
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        wait_for_calls(proc, out)
        proxy.down()
        killed = kill_containers_of(proc.pid)
        time.sleep(10)
        proxy.up()
        code, summary, stderr = finish(proc)
    assert code == 0, stderr[-5000:]
    assert killed >= 1, "no container of the run was running when Docker went down"
    docker_outages = [o for o in summary["outages"] if o["dependency"] == "the Docker engine"]
    assert len(docker_outages) == 1 and str(docker_outages[0]["recovered_by"]).startswith("answering again")
    assert summary["accepted"] == INSTANCES and summary["pending"] == 0
    corpus, rejects = lines(out / "corpus.jsonl"), lines(out / "rejects.jsonl")
    assert rejects == [], [r["reason"] for r in rejects]
    keys = [r["key"] for r in corpus]
    assert len(keys) == len(set(keys)) == INSTANCES
    for error in lines(out / "errors.jsonl"):
        assert error["reason"].split(":")[0] in ("init_error", "run_error", "postrun_error", "eval_error"), error
    assert_no_container_of(proc.pid)


def every_jsonl_line_is_whole(out: Path) -> int:
    """Every line of every JSONL file of the run (rows, state, capture) parses and ends with a newline."""
    n = 0
    for path in [*out.glob("*.jsonl"), *(out / "capture").glob("*.jsonl")]:
        data = path.read_bytes()
        assert not data or data.endswith(b"\n"), f"{path.name} ends in a torn line"
        for line in data.splitlines():
            json.loads(line)
            n += 1
    return n


def fill(directory: Path) -> Path:
    """Write a ballast file until the filesystem has no space left."""
    ballast = directory / "ballast"
    with ballast.open("wb") as fh:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                fh.write(chunk)
                fh.flush()
        except OSError:
            pass
    return ballast


def test_a_full_disk_stops_the_run_cleanly_and_the_run_resumes_once_there_is_space(tmp_path: Path) -> None:
    """The run directory on a small tmpfs (as root, which CI is): filled while sessions run, the run stops with
    exit 1 and one `disk full` line, no file holds a torn line, and once space is back the same command finishes."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(disk)], capture_output=True)
    assert mounted.returncode == 0, f"this test mounts a tmpfs and needs root: {mounted.stderr.decode()}"
    try:
        recipe, out = write_recipe(tmp_path, {"kind": "gold"}), disk / "run"
        proc = start_generate(recipe, out)
        deadline = time.monotonic() + TIMEOUT
        while not lines(out / "corpus.jsonl"):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no row appeared"
            time.sleep(0.05)
        ballast = fill(disk)
        code, _summary, stderr = finish(proc)
        assert code == 1, stderr[-5000:]
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: disk full: writing "), stderr[-3000:]
        kept = (out / "corpus.jsonl").read_bytes()
        assert every_jsonl_line_is_whole(out) >= 1
        assert lines(out / "rejects.jsonl") == []
        assert_no_container_of(proc.pid)

        ballast.unlink()
        code, summary, stderr = finish(start_generate(recipe, out))
        assert code == 0, stderr[-5000:]
        assert (out / "corpus.jsonl").read_bytes().startswith(kept), "a row written before the disk filled changed"
        keys = [r["key"] for r in lines(out / "corpus.jsonl")]
        assert len(keys) == len(set(keys)) == INSTANCES and summary["accepted"] == INSTANCES
        every_jsonl_line_is_whole(out)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


MISBEHAVING = {
    # perl is in the base image: a 512 MiB string under the 64 MiB limit
    "oom": "exec perl -e '$x = q(a) x (512*1024*1024); print qq(survived)'",
    "flood": "yes polar-output-flood | head -c 3000000000",
    "background": "sleep 10000 & sleep 10000 > /dev/null 2>&1 & echo started",
    "idle": "true",
}


def test_misbehaving_harnesses_in_a_run_end_with_their_own_reasons_and_free_their_slots(tmp_path: Path) -> None:
    """Four harnesses from the recipe (no bundle: a shell command in the instance image), one session each, on one
    RUN slot: each ends with its own reason, promptly, and none leaves a container behind."""
    recipe_path = write_recipe(tmp_path, {"kind": "gold"})
    recipe = json.loads(recipe_path.read_text())
    recipe["manifest"]["limit"] = 1
    recipe["custom_harnesses"] = {
        name: {"api": "openai-chat", "argv": ["/bin/sh", "-c", script], "bundle": None}
        for name, script in MISBEHAVING.items()
    }
    recipe["harnesses"] = list(MISBEHAVING)
    recipe["runtime"].update(memory_mb=64, output_limit_mb=64)
    recipe["concurrency"] = {"init": 1, "run": 1, "postrun": 1, "ready": 1}
    recipe["timeouts"] = {"session": 300, "eval": 300}
    recipe_path.write_text(json.dumps(recipe))
    out = tmp_path / "run"
    proc = start_generate(recipe_path, out)
    code, summary, stderr = finish(proc)
    assert code == 0, stderr[-5000:]
    assert summary["attempts"] == len(MISBEHAVING) and lines(out / "errors.jsonl") == []
    rows = {r["harness"]: r for r in lines(out / "rejects.jsonl")}
    reasons = {name: row["reason"].split(":")[0] for name, row in rows.items()}
    assert reasons == {"oom": "oom", "flood": "output_limit", "background": "no_patch", "idle": "no_patch"}, rows
    for name, row in rows.items():
        # freed promptly: nothing waited for the 300 s session timeout
        assert row["timing"]["run"] < 60, (name, row["timing"])
    assert_no_container_of(proc.pid)

"""The docker runtime against a real engine: exec semantics, files, limits, labels, cleanup and the orphan sweep."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from polar_cli.runtime.base import MANAGED_LABEL, OWNER_LABEL, ROLE_LABEL, ContainerSpec
from polar_cli.runtime.docker import DockerContainer, DockerRuntime

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
ARGV_HOSTILE = ["it's", '"$(id)"', "`id`", "a\nb", "tab\there", "ünï 🚀", "", "-x", "*", "\\"]


@pytest.fixture(scope="module")
def box(runtime: DockerRuntime, base_image: str) -> Iterator[DockerContainer]:
    container = runtime.start(
        ContainerSpec(image=base_image, role="test", env={"FROM_SPEC": "yes"}, cpus=0.5, memory_bytes=256 << 20)
    )
    try:
        yield container
    finally:
        container.remove()


def test_argv_reaches_the_process_byte_for_byte(box: DockerContainer) -> None:
    result = box.exec(["printf", "%s\\0", *ARGV_HOSTILE], timeout=30)
    assert result.exit_code == 0
    assert result.output.split(b"\0")[:-1] == [a.encode() for a in ARGV_HOSTILE]


def test_exit_code_env_workdir_and_stdin(box: DockerContainer) -> None:
    result = box.exec(
        ["sh", "-c", 'echo "$FROM_SPEC $FROM_EXEC $(pwd)"; cat; exit 7'],
        timeout=30,
        env={"FROM_EXEC": "too"},
        workdir="/tmp",
        stdin=b"from stdin\n",
    )
    assert result.exit_code == 7
    assert result.output == b"yes too /tmp\nfrom stdin\n"
    assert not result.timed_out and not result.truncated


def test_stdin_is_never_a_terminal(box: DockerContainer) -> None:
    result = box.exec(["sh", "-c", "test -t 0 && echo tty; cat | wc -c"], timeout=30)
    assert result.output.strip() == b"0"


def test_output_is_capped(box: DockerContainer) -> None:
    result = box.exec(["head", "-c", "3000000", "/dev/zero"], timeout=30, output_cap=1000)
    assert result.exit_code == 0
    assert result.output == b"\0" * 1000
    assert result.truncated


def test_timeout_kills_the_whole_process_tree(box: DockerContainer) -> None:
    start = time.monotonic()
    # a child in the background, a grandchild that starts its own session: all must die
    result = box.exec(["sh", "-c", "sleep 301 & setsid sleep 302 & sleep 303; echo never"], timeout=1.5)
    assert result.timed_out and result.exit_code is None
    assert b"never" not in result.output
    assert time.monotonic() - start < 10
    left = box.exec(["ps", "-eo", "args"], timeout=30).output.decode()
    assert "sleep 30" not in left, left


def test_files_in_and_out(box: DockerContainer) -> None:
    box.put_files({"/work/deep/dir/a.txt": b"alpha\x00\xff", "/tmp/b": b""}, mode=0o600)
    assert box.get_file("/work/deep/dir/a.txt") == b"alpha\x00\xff"
    assert box.get_file("/tmp/b") == b""
    assert box.exec(["stat", "-c", "%a", "/work/deep/dir/a.txt", "/tmp"], timeout=30).output == b"600\n1777\n"
    with pytest.raises(FileNotFoundError):
        box.get_file("/no/such/file")


def test_labels_limits_and_host_network(runtime: DockerRuntime, box: DockerContainer) -> None:
    info: dict[str, Any] = runtime.client.api.inspect_container(box.id)
    labels = info["Config"]["Labels"]
    assert labels[MANAGED_LABEL] == "1" and labels[ROLE_LABEL] == "test" and labels[OWNER_LABEL] == runtime.owner
    assert info["HostConfig"]["NetworkMode"] == "host"
    assert info["HostConfig"]["NanoCpus"] == 500_000_000
    assert info["HostConfig"]["Memory"] == 256 << 20
    # host network: the container sees the host's loopback listeners
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
        assert box.exec(["bash", "-c", probe], timeout=30).output == b"connected\n"


def test_bundle_is_mounted_read_only(runtime: DockerRuntime, base_image: str, bundles: dict[str, str]) -> None:
    container = runtime.start(ContainerSpec(image=base_image, role="test", volumes_from=(bundles["pi"],)))
    try:
        assert container.exec(["/opt/polar/harness/pi/bin/node", "--version"], timeout=60).output.startswith(b"v22.")
        denied = container.exec(["touch", "/opt/polar/harness/pi/x"], timeout=30)
        assert denied.exit_code != 0 and b"Read-only" in denied.output
    finally:
        container.remove()
    container.remove()  # twice is fine


def test_sweep_removes_containers_of_dead_owners_only(runtime: DockerRuntime, base_image: str) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan_maker = DockerRuntime(runtime.client)
    orphan_maker.owner = f"{socket.gethostname()}:{dead.pid}:1"
    orphan = orphan_maker.start(ContainerSpec(image=base_image, role="test"))
    mine = runtime.start(ContainerSpec(image=base_image, role="test"))
    try:
        assert runtime.sweep() >= 1
        ids = {c["Id"] for c in runtime.client.api.containers(all=True)}
        assert orphan.id not in ids
        assert mine.id in ids
    finally:
        mine.remove()
        orphan_maker.close()


SCRIPT = textwrap.dedent(
    """
    import sys, time
    from polar_cli.runtime.base import ContainerSpec
    from polar_cli.runtime.docker import DockerRuntime
    runtime = DockerRuntime()
    container = runtime.start(ContainerSpec(image=sys.argv[1], role="test"))
    print(container.id, flush=True)
    container.exec(["sleep", "600"], timeout=600)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill"])
def test_interrupted_owner_leaves_nothing_behind(runtime: DockerRuntime, base_image: str, sig: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, base_image],
        cwd=REPO,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        # as at a terminal: a shell that runs the suite in the background (scripts/test runs two groups at once) hands
        # its children SIGINT ignored, and Python then never turns Ctrl-C into KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    container_id = proc.stdout.readline().decode().strip()
    assert container_id
    time.sleep(1.0)
    proc.send_signal(sig)
    proc.wait(120)
    if sig == signal.SIGKILL:
        # nothing ran at exit: a sweep is what cleans up (this one, or that of a run started meanwhile beside it)
        runtime.sweep()
    assert container_id not in {c["Id"] for c in runtime.client.api.containers(all=True)}

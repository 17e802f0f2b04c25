"""Exec plumbing without an engine: frame decoding, the output cap, and the wrapper scripts run on this host."""

from __future__ import annotations

import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

from polar_cli.runtime.execution import CappedBuffer, FrameDecoder, kill_argv, wrapped_argv


def frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def test_frames_whole_and_byte_by_byte() -> None:
    data = frame(1, b"out ") + frame(2, b"err ") + frame(1, b"") + frame(1, b"\x00tail")
    assert list(FrameDecoder().feed(data)) == [b"out ", b"err ", b"\x00tail"]
    decoder = FrameDecoder()
    got = [p for i in range(len(data)) for p in decoder.feed(data[i : i + 1])]
    assert got == [b"out ", b"err ", b"\x00tail"]
    assert decoder.pending == 0


def test_partial_frame_waits_for_the_rest() -> None:
    decoder = FrameDecoder()
    data = frame(1, b"abcdef")
    assert list(decoder.feed(data[:10])) == []
    assert decoder.pending == 10
    assert list(decoder.feed(data[10:])) == [b"abcdef"]


def test_capped_buffer_keeps_the_head() -> None:
    buf = CappedBuffer(5)
    for part in (b"ab", b"cd", b"ef", b"gh"):
        buf.add(part)
    assert buf.value() == b"abcde"
    assert buf.truncated
    exact = CappedBuffer(4)
    exact.add(b"abcd")
    assert exact.value() == b"abcd" and not exact.truncated


def test_wrapped_argv_refuses_nul_and_empty() -> None:
    with pytest.raises(ValueError, match=r"argv\[1\]"):
        wrapped_argv(["echo", "a\0b"], "/tmp/p")
    with pytest.raises(ValueError, match="empty"):
        wrapped_argv([], "/tmp/p")


def test_wrapper_passes_argv_intact_and_records_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    stdin = tmp_path / "stdin"
    stdin.write_bytes(b"from a file")
    args = ["it's", '"$(id)"', "`id`", "a\nb", "", "-e", "ünï 🚀", "*"]
    script = 'printf "%s\\0" "$@"; cat; echo; ps -o pgid= -p $$'
    argv = wrapped_argv(["sh", "-c", script, "sh", *args], str(pidfile), str(stdin))
    out = subprocess.run(argv, capture_output=True, check=True).stdout
    *printed, tail = out.split(b"\0")
    assert printed == [a.encode() for a in args]
    lines = tail.splitlines()
    assert lines[0] == b"from a file"
    # the command ran as the leader of its own group, whose id the pidfile holds
    assert int(lines[1]) == int(pidfile.read_text()) != os.getpgid(0)


def test_kill_script_kills_the_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    # a background child, and a grandchild that leaves the group with its own session
    script = "sleep 311 & setsid sleep 312 & sleep 313"
    proc = subprocess.Popen(wrapped_argv(["sh", "-c", script], str(pidfile)))
    for _ in range(100):
        if pidfile.read_text().strip() if pidfile.exists() else "":
            break
        time.sleep(0.05)
    time.sleep(0.3)
    subprocess.run(kill_argv(str(pidfile)), check=True)
    proc.wait(10)
    time.sleep(0.2)
    left = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not [line for line in left.splitlines() if line.startswith("sleep 31")], left


def test_kill_script_without_a_pid_is_a_no_op(tmp_path: Path) -> None:
    assert subprocess.run(kill_argv(str(tmp_path / "absent"))).returncode == 0
    (tmp_path / "empty").write_text("")
    assert subprocess.run(kill_argv(str(tmp_path / "empty"))).returncode == 0

"""One process per run directory (issue 23 #4): two `polar generate` on one ``--out`` (a cron overlap) once wrote 10
of 12 keys twice, to the corpus and to state.jsonl. The second now exits 1 with one line naming the holder's pid,
before it opens anything; a holder killed with -9 leaves no lock behind. The same for `polar serve`'s state dir."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from polar_cli.config import load_recipe
from polar_cli.dirlock import LOCK_FILE, directory_lock
from polar_cli.errors import DirectoryBusy
from polar_cli.generate.run import generate
from polar_cli.serve.run import state_lock

ROOT = Path(__file__).resolve().parents[3]
HOLD = """
import sys, time
from pathlib import Path
from polar_cli.dirlock import directory_lock
with directory_lock(Path(sys.argv[1]), "run directory"):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """Another process (a run still going) holding the lock of ``tmp_path / "run"``."""
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    try:
        yield run_dir, holder
    finally:
        holder.kill()
        holder.wait()


def test_a_second_generate_on_one_run_directory_exits_1_naming_the_holder(
    held: tuple[Path, subprocess.Popen[str]],
) -> None:
    run_dir, holder = held
    cli = [sys.executable, "-m", "polar_cli", "generate", "recipes/demo.yaml", "--out", str(run_dir), "--no-progress"]
    done = subprocess.run(cli, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines == [f"error: run directory {run_dir} is in use by another process (pid {holder.pid}); wait for it "
                     "to end, or use another directory"]  # fmt: skip
    assert sorted(p.name for p in run_dir.iterdir()) == [LOCK_FILE]  # nothing opened, nothing written


def test_generate_refuses_before_it_opens_the_run_state(held: tuple[Path, subprocess.Popen[str]]) -> None:
    run_dir, holder = held
    recipe = load_recipe(ROOT / "recipes/demo.yaml", [])
    with pytest.raises(DirectoryBusy, match=f"pid {holder.pid}"):
        generate(recipe, run_dir, live=False, runtime_factory=lambda: pytest.fail("a runtime was opened"))  # type: ignore[arg-type, return-value]
    assert not (run_dir / "state.jsonl").exists()


def test_a_holder_killed_with_9_leaves_no_lock_behind(held: tuple[Path, subprocess.Popen[str]]) -> None:
    run_dir, holder = held
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with directory_lock(run_dir, "run directory"):
        assert (run_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_two_locks_in_one_process_also_conflict(tmp_path: Path) -> None:
    busy = pytest.raises(DirectoryBusy, match=f"pid {os.getpid()}")
    with directory_lock(tmp_path, "run directory"), busy, directory_lock(tmp_path, "run directory"):
        pass
    with directory_lock(tmp_path, "run directory"):  # released when the first block ended
        pass


def test_a_second_serve_on_one_state_directory_is_refused_naming_the_holder(
    held: tuple[Path, subprocess.Popen[str]],
) -> None:
    state_dir, holder = held
    with pytest.raises(DirectoryBusy, match=rf"state directory .* \(pid {holder.pid}\)"), state_lock(state_dir):
        pass

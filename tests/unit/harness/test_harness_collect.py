"""The patch and artifact scripts, run with this host's sh, git and tar on scratch repositories."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from polar_cli.harness.collect import (
    ARTIFACTS_MEMBER,
    BASE_SCRIPT,
    COLLECT_SCRIPT,
    INLINE_MAX,
    PATCH_MEMBER,
    PATCH_SCRIPT,
    collect_outputs,
    exclude_pathspecs,
)
from polar_cli.runtime.base import ExecResult
from tests.support.fake_runtime import FakeContainer, result

GIT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin", "HOME": "/tmp"}


def sh(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", script, "test", *args], capture_output=True, text=True, env=GIT_ENV)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=GIT_ENV
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "testbed"
    repo.mkdir()
    (repo / "keep.py").write_text("a = 1\n")
    (repo / "gone.py").write_text("b = 2\n")
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return repo


def base_of(repo: Path) -> str:
    result = sh(BASE_SCRIPT, str(repo))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def patch_of(repo: Path, base: str, droppings: list[str], tmp_path: Path) -> str:
    out = tmp_path / "patch.diff"
    result = sh(PATCH_SCRIPT, str(repo), base, str(out), *exclude_pathspecs(droppings))
    assert result.returncode == 0, result.stderr
    return out.read_text()


def test_patch_has_edits_new_files_deletions_and_binaries_but_no_droppings(repo: Path, tmp_path: Path) -> None:
    base = base_of(repo)
    assert base == git(repo, "rev-parse", "HEAD").strip()
    (repo / "keep.py").write_text("a = 2\n")
    (repo / "gone.py").unlink()
    (repo / "new dir").mkdir()
    (repo / "new dir" / "ünï.py").write_text("c = 3\n")
    (repo / "blob.bin").write_bytes(b"\x00\x01\x02\xff")
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.local.json").write_text("{}")
    (repo / "debug.log").write_text("ignored by the repo\n")
    status_before = git(repo, "status", "--porcelain")

    patch = patch_of(repo, base, [".claude"], tmp_path)

    assert "+a = 2" in patch and "-a = 1" in patch
    assert "deleted file mode" in patch and "gone.py" in patch
    assert "+c = 3" in patch and "new dir/ünï.py" in patch
    assert "GIT binary patch" in patch
    assert ".claude" not in patch and "debug.log" not in patch
    # the repository's own index is untouched
    assert git(repo, "status", "--porcelain") == status_before


def test_patch_applies_back_onto_the_base(repo: Path, tmp_path: Path) -> None:
    base = base_of(repo)
    (repo / "keep.py").write_text("a = 42\n")
    (repo / "added.txt").write_text("new\n")
    patch = patch_of(repo, base, [], tmp_path)
    git(repo, "stash", "-u", "-q")
    (tmp_path / "p.diff").write_text(patch)
    git(repo, "apply", str(tmp_path / "p.diff"))
    assert (repo / "keep.py").read_text() == "a = 42\n" and (repo / "added.txt").read_text() == "new\n"


def test_unchanged_tree_gives_an_empty_patch(repo: Path, tmp_path: Path) -> None:
    assert patch_of(repo, base_of(repo), [], tmp_path) == ""


def test_a_plain_directory_becomes_a_repository(tmp_path: Path) -> None:
    work = tmp_path / "plain"
    work.mkdir()
    (work / "f.txt").write_text("before\n")
    base = base_of(work)
    assert len(base) == 40
    (work / "f.txt").write_text("after\n")
    patch = patch_of(work, base, [], tmp_path)
    assert "-before" in patch and "+after" in patch
    # a missing workdir is created, with an empty first commit
    assert len(base_of(tmp_path / "absent" / "testbed")) == 40


def collect(
    out: Path, artifacts: list[str], repo: Path, base: str, droppings: list[str], inline: int = INLINE_MAX
) -> tuple[subprocess.CompletedProcess[bytes], dict[str, bytes]]:
    """COLLECT_SCRIPT's exit and output (stdout and stderr apart), and its tar's members by name."""
    argv = [str(out), str(inline), str(len(artifacts)), *artifacts, str(repo), base, *exclude_pathspecs(droppings)]
    result = subprocess.run(["/bin/sh", "-c", COLLECT_SCRIPT, "test", *argv], capture_output=True, env=GIT_ENV)
    return result, members_of(out.read_bytes()) if out.exists() else {}


def members_of(tar_bytes: bytes) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for m in tar.getmembers():
            fh = tar.extractfile(m) if m.isfile() else None
            if fh is not None:
                members[m.name.removeprefix("./")] = fh.read()
    return members


def names_in(tar_bytes: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        return tar.getnames()


def test_collect_takes_the_patch_byte_for_byte_as_the_patch_script_and_only_the_artifacts_that_exist(
    repo: Path, tmp_path: Path
) -> None:
    base = base_of(repo)
    (repo / "keep.py").write_text("a = 2\n")
    (repo / "blob.bin").write_bytes(b"\x00\x01\x02\xff")
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.local.json").write_text("{}")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.jsonl").write_text("{}\n")
    alone = patch_of(repo, base, [".claude"], tmp_path)

    artifacts = [str(tmp_path / "logs"), str(tmp_path / "missing")]
    result, members = collect(tmp_path / "c.tar", artifacts, repo, base, [".claude"])

    # the tar is printed (nothing else is), and left in the container for a copy out
    assert result.returncode == 0 and result.stderr == b"" and result.stdout == (tmp_path / "c.tar").read_bytes()
    assert set(members) == {PATCH_MEMBER, ARTIFACTS_MEMBER}
    assert members[PATCH_MEMBER] == alone.encode() and "GIT binary patch" in alone and ".claude" not in alone
    names = names_in(members[ARTIFACTS_MEMBER])
    assert f"{str(tmp_path / 'logs').lstrip('/')}/a.jsonl" in names and not any("missing" in n for n in names)


def test_collect_without_artifacts_or_none_that_exist_holds_the_patch_alone(repo: Path, tmp_path: Path) -> None:
    base = base_of(repo)
    for artifacts in ([], [str(tmp_path / "missing")]):
        result, members = collect(tmp_path / "c.tar", artifacts, repo, base, [])
        assert result.returncode == 0 and members == {PATCH_MEMBER: b""}


def test_a_failing_patch_fails_the_collect_with_its_own_output_and_keeps_the_artifacts(
    repo: Path, tmp_path: Path
) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.jsonl").write_text("{}\n")
    result, members = collect(tmp_path / "c.tar", [str(tmp_path / "logs")], repo, "f" * 40, [])
    assert result.returncode != 0 and ("f" * 40).encode() in result.stdout  # the log, not the tar
    assert ARTIFACTS_MEMBER in members  # (and whatever the failed diff left: the exit status says it failed)
    result, members = collect(tmp_path / "c.tar", [], tmp_path / "absent", "f" * 40, [])
    assert result.returncode == 3 and members == {}


def test_a_tar_over_the_inline_limit_is_left_to_copy_out(repo: Path, tmp_path: Path) -> None:
    (repo / "keep.py").write_text("a = 2\n")
    result, members = collect(tmp_path / "c.tar", [], repo, base_of(repo), [], inline=100)
    assert result.returncode == 0 and result.stdout == b"" and b"+a = 2" in members[PATCH_MEMBER]


class Collecting(FakeContainer):
    """A container whose collect exec answers ``answer`` and leaves ``left`` as the tar to copy out."""

    def __init__(self, answer: ExecResult, left: bytes | None) -> None:
        super().__init__("c0", None, lambda name, container: answer)  # type: ignore[arg-type]
        if left is not None:
            self.files["/tmp/.polar-exec/collect.tar"] = left
        self.copied: list[str] = []

    def get_file(self, path: str) -> bytes:
        self.copied.append(path)
        return super().get_file(path)


def tar_with_patch(patch: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(f"./{PATCH_MEMBER}")
        info.size = len(patch)
        tar.addfile(info, io.BytesIO(patch))
    return buf.getvalue()


@pytest.mark.parametrize(
    ("answer", "copied"),
    [
        (result(tar_with_patch(b"printed")), []),  # printed: no copy out
        (result(b""), ["/tmp/.polar-exec/collect.tar"]),  # over the inline limit: copied out
        (result(b"not a tar at all"), ["/tmp/.polar-exec/collect.tar"]),  # cut short: copied out
    ],
)
def test_collect_outputs_takes_the_printed_tar_or_copies_it_out(answer: ExecResult, copied: list[str]) -> None:
    container = Collecting(answer, tar_with_patch(b"copied"))
    taken = collect_outputs(container, "/testbed", "b" * 40, [])
    assert taken.patch == ("printed" if not copied else "copied") and container.copied == copied


def test_a_failed_collect_says_why_from_its_log_and_still_copies_the_artifacts_out() -> None:
    container = Collecting(result(b"fatal: bad object", 5), tar_with_patch(b""))
    taken = collect_outputs(container, "/testbed", "b" * 40, [])
    assert taken.patch is None and "fatal: bad object" in (taken.error or "") and container.copied

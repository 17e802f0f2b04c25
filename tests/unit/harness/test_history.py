"""The history strip script, run with this host's sh and git on scratch repositories that leak the future."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from polar_cli.errors import RuntimeFailure
from polar_cli.harness.collect import BASE_SCRIPT
from polar_cli.harness.history import STRIP_SCRIPT, Stripped, parse_stripped, strip_history
from polar_cli.runtime.base import ExecResult
from tests.support.fake_runtime import FakeContainer, result

GIT_ENV = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PATH": "/usr/bin:/bin",
    "HOME": "/tmp",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def git(repo: Path, *args: str, check: bool = True, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=check, env=GIT_ENV, input=stdin
    )
    return done.stdout + (done.stderr if not check else "")


def strip(repo: Path, base: str) -> Stripped:
    done = subprocess.run(
        ["/bin/sh", "-c", STRIP_SCRIPT, "test", str(repo), base], capture_output=True, text=True, env=GIT_ENV
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return parse_stripped(done.stdout)


def commit(repo: Path, name: str, text: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-qm", f"{name}: {text.strip()}")
    return git(repo, "rev-parse", "HEAD").strip()


def ancestry(repo: Path, base: str) -> set[str]:
    return set(git(repo, "rev-list", base).split())


def assert_nothing_after(repo: Path, base: str, later: list[str]) -> None:
    """Every way an agent reaches for history finds the base and its ancestors, or nothing."""
    allowed = ancestry(repo, base)
    assert set(git(repo, "log", "--all", "--format=%H").split()) == allowed
    assert set(git(repo, "rev-list", "--all", "--reflog").split()) == allowed
    fsck = git(repo, "fsck", "--unreachable", "--no-reflogs", check=False)
    assert "unreachable" not in fsck and "dangling" not in fsck, fsck
    lost = git(repo, "fsck", "--lost-found", check=False)
    assert "dangling" not in lost and not (repo / ".git/lost-found").exists(), lost
    for sha in later:
        missing = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", sha], env=GIT_ENV, capture_output=True)
        assert missing.returncode != 0, f"{sha} is still in the object store"
    for name in ("ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "logs", "COMMIT_EDITMSG"):
        assert not (repo / ".git" / name).exists(), name
    assert git(repo, "stash", "list") == "" and git(repo, "reflog") == "" and git(repo, "remote") == ""
    assert git(repo, "notes", "list") == "" and git(repo, "replace", "-l") == ""
    assert git(repo, "rev-parse", "HEAD").strip() == base


@pytest.fixture
def leaky(tmp_path: Path) -> tuple[Path, str, list[str]]:
    """A SWE-bench-like checkout: base on main, and the future in every corner git keeps things."""
    repo = tmp_path / "testbed"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    first = commit(repo, "a.py", "a = 1\n")
    git(repo, "tag", "-a", "-m", "old release", "v1.0", first)
    base = commit(repo, "a.py", "a = 2\n")
    fix = commit(repo, "a.py", "a = 'the gold fix'\n")
    tip = commit(repo, "b.py", "b = 'later still'\n")
    later = [fix, tip]
    git(repo, "tag", "v2.0", fix)
    git(repo, "tag", "-a", "-m", "late", "v3.0", tip)
    later.append(git(repo, "rev-parse", "v3.0").strip())  # the annotated tag object itself
    git(repo, "branch", "feature", tip)
    git(repo, "update-ref", "refs/remotes/origin/main", tip)
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
    git(repo, "config", "remote.origin.url", "https://github.com/org/repo")
    git(repo, "config", "branch.main.remote", "origin")
    git(repo, "notes", "add", "-m", "note on the fix", fix)
    later.append(git(repo, "notes", "list", fix).strip())
    git(repo, "replace", "--graft", fix, first)
    later.append(git(repo, "rev-parse", f"refs/replace/{fix}").strip())
    git(repo, "reset", "-q", "--hard", base)  # clone, then reset to the base: the reflog holds the old tip
    (repo / ".git/FETCH_HEAD").write_text(f"{tip}\t\tbranch 'main' of https://github.com/org/repo\n")
    # a stash of the fix, then a dangling commit and a dangling blob no ref ever named
    (repo / "a.py").write_text("a = 'stashed fix'\n")
    git(repo, "stash", "-q")
    later.append(git(repo, "rev-parse", "stash@{0}").strip())
    tree = git(repo, "rev-parse", f"{tip}^{{tree}}").strip()
    later.append(git(repo, "commit-tree", tree, "-p", tip, "-m", "dangling", stdin="").strip())
    later.append(git(repo, "hash-object", "-w", "--stdin", stdin="a = 'dangling blob fix'\n").strip())
    git(repo, "gc", "-q")  # most of it packed, as in an image
    later.append(git(repo, "hash-object", "-w", "--stdin", stdin="loose after the pack\n").strip())
    (repo / ".git/ORIG_HEAD").write_text(tip + "\n")
    # the image's own uncommitted state: an edit and a staged new file
    (repo / "a.py").write_text("a = 'edited in the image'\n")
    (repo / "new.py").write_text("n = 1\n")
    git(repo, "add", "new.py")
    return repo, base, later


def test_nothing_after_the_base_is_left_anywhere(leaky: tuple[Path, str, list[str]]) -> None:
    repo, base, later = leaky
    assert set(git(repo, "log", "--all", "--format=%H").split()) > ancestry(repo, base)  # it did leak
    stripped = strip(repo, base)
    assert_nothing_after(repo, base, later)
    assert stripped.refs == 8  # feature, origin/main, origin/HEAD, v2.0, v3.0, stash, notes, replace
    assert stripped.remotes == 1 and stripped.reflog > 0 and stripped.repacked
    assert stripped.objects_after < stripped.objects_before
    # history before the base stays, with its tags; HEAD is the branch it was on
    assert git(repo, "tag").split() == ["v1.0"]
    assert git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git(repo, "config", "--get-regexp", "^(remote|branch)\\.", check=False) == ""
    # the working tree and the index are as the image had them
    assert (repo / "a.py").read_text() == "a = 'edited in the image'\n"
    assert git(repo, "diff", "--cached", "--name-only").split() == ["new.py"]
    assert git(repo, "status", "--porcelain").splitlines() == [" M a.py", "A  new.py"]
    # the staged blob is the index's, so kept; and the repository is sound
    assert git(repo, "cat-file", "-p", ":new.py") == "n = 1\n"
    assert "error" not in git(repo, "fsck", "--no-dangling", check=False)


def test_a_second_strip_finds_nothing_and_skips_the_repack(leaky: tuple[Path, str, list[str]]) -> None:
    repo, base, later = leaky
    strip(repo, base)
    again = strip(repo, base)
    assert (again.refs, again.reflog, again.remotes, again.repacked) == (0, 0, 0, False)
    assert again.objects_before == again.objects_after
    assert_nothing_after(repo, base, later)


def test_a_detached_head_becomes_main_at_the_base(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "trunk")
    base = commit(repo, "x", "1\n")
    later = commit(repo, "x", "2\n")
    git(repo, "checkout", "-q", "--detach", base)
    strip(repo, base)
    assert git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git(repo, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]
    assert_nothing_after(repo, base, [later])


def test_a_base_behind_head_moves_the_branch_and_keeps_the_tree(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, "x", "1\n")
    later = commit(repo, "x", "2\n")
    strip(repo, base)
    assert (repo / "x").read_text() == "2\n"  # the tree is the image's; only the refs moved
    assert_nothing_after(repo, base, [later])


def test_a_clean_repository_is_left_alone(tmp_path: Path) -> None:
    # an ad-hoc image: the base script made the repository, so every object is reachable
    (tmp_path / "f.txt").write_text("hi\n")
    done = subprocess.run(
        ["/bin/sh", "-c", BASE_SCRIPT, "t", str(tmp_path)], capture_output=True, text=True, env=GIT_ENV
    )
    base = done.stdout.strip()
    stripped = strip(tmp_path, base)
    assert (stripped.refs, stripped.repacked) == (0, False) and stripped.objects_before == stripped.objects_after
    assert git(tmp_path, "rev-parse", "HEAD").strip() == base and (tmp_path / "f.txt").read_text() == "hi\n"


def test_only_a_dangling_blob_still_repacks(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, "x", "1\n")
    git(repo, "reflog", "expire", "--expire=all", "--all")
    blob = git(repo, "hash-object", "-w", "--stdin", stdin="the fix, dangling\n").strip()
    stripped = strip(repo, base)
    assert stripped.refs == 0 and stripped.repacked
    assert_nothing_after(repo, base, [blob])


def test_borrowed_objects_are_copied_in_and_the_alternates_dropped(tmp_path: Path) -> None:
    upstream = tmp_path / "up"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    base = commit(upstream, "x", "1\n")
    later = commit(upstream, "x", "2\n")
    repo = tmp_path / "r"
    git(tmp_path, "clone", "-q", "--shared", str(upstream), str(repo))
    git(repo, "reset", "-q", "--hard", base)
    strip(repo, base)
    assert not (repo / ".git/objects/info/alternates").exists()
    assert_nothing_after(repo, base, [later])
    assert git(repo, "show", "HEAD:x") == "1\n"


def test_a_missing_base_commit_fails_loudly(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    commit(repo, "x", "1\n")
    done = subprocess.run(
        ["/bin/sh", "-c", STRIP_SCRIPT, "t", str(repo), "f" * 40], capture_output=True, text=True, env=GIT_ENV
    )
    assert done.returncode == 4 and "is not in" in done.stdout


def test_strip_history_reports_counts_and_refuses_a_failed_run() -> None:
    out = "warning: chatter\nrefs=3\nreflog=7\nremotes=1\nobjects_before=10\nobjects_after=4\nrepacked=1\n"
    container = FakeContainer("c", None, lambda name, c: result(out))  # type: ignore[arg-type]
    stripped = strip_history(container, "/testbed", "b" * 40)
    assert (stripped.refs, stripped.reflog, stripped.remotes, stripped.repacked) == (3, 7, 1, True)
    assert (stripped.objects_before, stripped.objects_after) == (10, 4)
    assert container.execs[0][0][3:] == ["polar-strip", "/testbed", "b" * 40]
    failing = FakeContainer("c", None, lambda name, c: ExecResult(4, b"polar: base commit", False, False, 0.1))  # type: ignore[arg-type]
    with pytest.raises(RuntimeFailure, match="stripping git history"):
        strip_history(failing, "/testbed", "b" * 40)

"""Real instances from real public repositories, built the SWE-bench way from a real upstream fix.

Nothing of the upstream code is committed. Each spec in ``tests/real/instances.json`` names a package on PyPI and
two consecutive releases: the released source distribution of the first is the repository at the base commit, and
the difference to the second (a bugfix release: the upstream fix commits, with their tests) is split, as SWE-bench
splits a pull request, into the gold patch (the files the spec lists under ``gold``) and the test patch (``test``).
FAIL_TO_PASS / PASS_TO_PASS are what SWE-bench's validation finds (`derive`: the test files run on base + test
patch and on base + gold + test patch, in the image), kept in the spec so a change upstream cannot go unnoticed.

`prepare` downloads both sdists (and the test dependencies as wheels) with the configured pip, checks them against
the spec's sha256, and writes under ``.cache/real-instances/``: one build context per instance (Dockerfile, the base
sdist, the wheels) and ``instances.jsonl``, a manifest `polar images build instances` / `polar validate` read.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "tests" / "real" / "instances.json"
DOCKERFILE = ROOT / "tests" / "real" / "Dockerfile"
MAKE_HISTORY = ROOT / "recipes" / "demo" / "make_history.sh"
CACHE = ROOT / ".cache" / "real-instances"
IMAGE_PREFIX = "polar-real"
IMAGE_PYTHON = "3.11"  # the bootstrapped base is Debian bookworm


@dataclass(frozen=True, slots=True)
class Spec:
    instance_id: str
    repo: str
    package: str
    base: str
    fixed: str
    sha256: Mapping[str, str]  # sdist file name -> sha256
    requirements: tuple[str, ...]
    gold: tuple[str, ...]
    test: tuple[str, ...]
    problem_statement: str
    src: str = "."
    test_cmd: str | None = None
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.repo.split("/")[1].lower()

    @property
    def image(self) -> str:
        return f"{IMAGE_PREFIX}/{self.name}:{self.base}"


def load_specs(path: Path = SPECS) -> list[Spec]:
    rows = json.loads(path.read_text())
    specs = []
    for row in rows:
        row = dict(row)
        for key in ("requirements", "gold", "test", "fail_to_pass", "pass_to_pass"):
            row[key] = tuple(row.get(key, ()))
        specs.append(Spec(**row))
    return specs


# ---- sdists --------------------------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], check=True)


def sdist(spec: Spec, version: str, into: Path) -> Path:
    """The release's source distribution, downloaded once and checked against the spec's hash."""
    into.mkdir(parents=True, exist_ok=True)
    found = [p for p in into.iterdir() if _is_sdist_of(p.name, spec.package, version)]
    if not found:
        _pip("download", "--quiet", "--no-deps", "--no-binary", ":all:", f"{spec.package}=={version}", "-d", str(into))
        found = [p for p in into.iterdir() if _is_sdist_of(p.name, spec.package, version)]
    if len(found) != 1:
        raise RuntimeError(f"{spec.instance_id}: expected one sdist of {spec.package} {version} in {into}: {found}")
    path = found[0]
    want = spec.sha256.get(path.name)
    got = _sha256(path)
    if want != got:
        raise RuntimeError(f"{spec.instance_id}: {path.name} has sha256 {got}, the spec says {want}")
    return path


def _is_sdist_of(filename: str, package: str, version: str) -> bool:
    stem = filename.removesuffix(".tar.gz")
    return filename.endswith(".tar.gz") and stem.lower().replace("_", "-") == f"{package}-{version}".lower()


def _top(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        return tar.getmembers()[0].name.split("/")[0]


def _unpack(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        # owned by whoever unpacks it, as in the image (git refuses a repository another user owns)
        tar.extractall(
            into,
            filter=lambda member, dest: tarfile.tar_filter(member, dest).replace(
                uid=None, gid=None, uname=None, gname=None
            ),
        )
    return into / _top(archive)


# ---- patches -------------------------------------------------------------------------------------------------

_GIT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def commit_base(tree: Path, repo: str) -> str:
    """Commit ``tree`` as the image does (make_history.sh): the instance's base_commit."""
    out = subprocess.run(["sh", str(MAKE_HISTORY), repo], cwd=tree, check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def _overlay(repo: Path, tree: Path) -> None:
    """Make the work tree of ``repo`` hold exactly ``tree``'s files (the fixed release)."""
    for path in repo.iterdir():
        if path.name != ".git":
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    shutil.copytree(tree, repo, dirs_exist_ok=True, symlinks=True)


def release_diff(repo: Path, paths: Iterable[str]) -> str:
    """The fixed release's change to ``paths`` against HEAD (the base commit), as a git patch."""
    paths = list(paths)
    _git(repo, "add", "-N", "--", *[p for p in paths if (repo / p).exists()])
    diff = _git(repo, "diff", "HEAD", "--", *paths)
    missing = [p for p in paths if f"a/{p} " not in diff and f"b/{p}\n" not in diff and f" b/{p}\n" not in diff]
    if missing:
        raise RuntimeError(f"the release diff does not touch {missing}")
    return diff


@dataclass(frozen=True, slots=True)
class Patches:
    base_commit: str
    gold: str
    test: str
    top: str  # the sdist's top directory


def make_patches(spec: Spec, sdists: Path) -> Patches:
    base = sdist(spec, spec.base, sdists)
    fixed = sdist(spec, spec.fixed, sdists)
    with tempfile.TemporaryDirectory(prefix="polar-real-") as tmp:
        repo = _unpack(base, Path(tmp) / "base")
        after = _unpack(fixed, Path(tmp) / "fixed")
        base_commit = commit_base(repo, spec.repo)
        _overlay(repo, after)
        gold = release_diff(repo, spec.gold)
        test = release_diff(repo, spec.test)
    return Patches(base_commit, gold, test, _top(base))


# ---- candidate patches --------------------------------------------------------------------------------------

# A root conftest.py whose hook reports every failed test as passed: the attack SWE-bench's grader does not see.
CONFTEST_ATTACK = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
"""
# The same for unittest-based runners (Django), from a test package's __init__.py the runner imports.
UNITTEST_ATTACK = """import unittest


def _nothing(*args, **kwargs):
    return None


for _name in dir(unittest.TestCase):
    if _name.startswith("assert") or _name == "fail":
        setattr(unittest.TestCase, _name, _nothing)
"""


def _test_package_init(spec: Spec) -> str:
    return str(Path(spec.test[0]).parent / "__init__.py")


def candidates(spec: Spec, sdists: Path = CACHE / "sdists") -> dict[str, str]:
    """Patches that must not resolve: ``wrong`` (a comment in the file the gold patch fixes) and ``tamper`` (the
    runner's hooks planted so failures read as passes: a root conftest.py, or for a unittest runner a test
    package's __init__.py)."""
    with tempfile.TemporaryDirectory(prefix="polar-real-") as tmp:
        repo = _unpack(sdist(spec, spec.base, sdists), Path(tmp) / "base")
        commit_base(repo, spec.repo)
        target = repo / spec.gold[0]
        target.write_text(target.read_text() + "\n# polar: a comment, not a fix\n")
        wrong = _git(repo, "diff")
        _git(repo, "checkout", "--", spec.gold[0])
        if spec.repo == "django/django":
            path, text = _test_package_init(spec), UNITTEST_ATTACK
        else:
            path, text = "conftest.py", CONFTEST_ATTACK
        (repo / path).write_text(text)
        _git(repo, "add", "-N", "--", path)
        tamper = _git(repo, "diff")
    return {"wrong": wrong, "tamper": tamper}


# ---- contexts and the manifest -------------------------------------------------------------------------------


def wheels(spec: Spec, into: Path) -> None:
    """The test dependencies as wheels for the image's Python (Debian bookworm's, whatever the host runs); the
    spec pins every one (no resolution at build time, so the context, and the image, stay the same)."""
    requirements = into / "requirements.txt"
    text = "".join(f"{r}\n" for r in spec.requirements)
    if requirements.exists() and requirements.read_text() == text:
        return
    into.mkdir(parents=True, exist_ok=True)
    arch = platform.machine()
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in (17, 28, 36)] + [f"manylinux2014_{arch}"]
    target = ["--python-version", IMAGE_PYTHON, "--implementation", "cp", "--abi", f"cp{IMAGE_PYTHON.replace('.', '')}"]
    for tag in platforms:
        target += ["--platform", tag]
    _pip("download", "--quiet", "--no-deps", "--only-binary", ":all:", *target, "-d", str(into), *spec.requirements)
    requirements.write_text(text)


def context(spec: Spec, patches: Patches, sdists: Path, contexts: Path) -> Path:
    where = contexts / spec.instance_id
    where.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DOCKERFILE, where / "Dockerfile")
    shutil.copyfile(MAKE_HISTORY, where / "make_history.sh")
    archive = sdist(spec, spec.base, sdists)
    target = where / archive.name
    if not target.exists() or _sha256(target) != _sha256(archive):
        shutil.copyfile(archive, target)
    wheels(spec, where / "wheels")
    return where


def row(spec: Spec, patches: Patches, context_dir: Path, manifest_dir: Path) -> dict[str, Any]:
    archive = next(p.name for p in context_dir.iterdir() if p.name.endswith(".tar.gz"))
    out: dict[str, Any] = {
        "repo": spec.repo,
        "instance_id": spec.instance_id,
        "base_commit": patches.base_commit,
        "patch": patches.gold,
        "test_patch": patches.test,
        "problem_statement": spec.problem_statement,
        "hints_text": "",
        "version": spec.base,
        "environment_setup_commit": patches.base_commit,
        "FAIL_TO_PASS": list(spec.fail_to_pass),
        "PASS_TO_PASS": list(spec.pass_to_pass),
        "image": spec.image,
        "build": {
            "context": os.path.relpath(context_dir, manifest_dir),
            "dockerfile": "Dockerfile",
            "args": {"SDIST": archive, "TOP": patches.top, "SRC": spec.src, "REPO": spec.repo},
        },
    }
    if spec.test_cmd:
        out["test_cmd"] = spec.test_cmd
    return out


def prepare(specs: list[Spec] | None = None, cache: Path = CACHE) -> Path:
    """Download, check, split and write the contexts and ``instances.jsonl``; returns the manifest's path."""
    manifest = cache / "instances.jsonl"
    marker = cache / ".inputs"
    inputs = _inputs_digest() if specs is None else None
    if inputs is not None and manifest.exists() and marker.exists() and marker.read_text() == inputs:
        return manifest
    specs = load_specs() if specs is None else specs
    sdists, contexts = cache / "sdists", cache / "contexts"
    rows = []
    for spec in specs:
        patches = make_patches(spec, sdists)
        rows.append(row(spec, patches, context(spec, patches, sdists, contexts), cache))
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    tmp.replace(manifest)
    if inputs is not None:
        marker.write_text(inputs)
    return manifest


def _inputs_digest() -> str:
    """What the prepared files are made of: the specs, the Dockerfile, make_history.sh and this module."""
    h = hashlib.sha256()
    for path in (SPECS, DOCKERFILE, MAKE_HISTORY, Path(__file__)):
        h.update(path.read_bytes())
    return h.hexdigest()


# ---- FAIL_TO_PASS / PASS_TO_PASS -----------------------------------------------------------------------------


def _statuses(log: str, repo: str) -> dict[str, str]:
    from polar_cli.swe import grading
    from polar_cli.swe.logparse import parser_for
    from polar_cli.swe.repos import REPOS

    # the repository's own parser where SWE-bench names one (repos.REPOS), else pytest's (the rows' test_cmd)
    parser = parser_for(repo) if repo in REPOS else parser_for("", "pytest")
    between = log.split(grading.START_TEST_OUTPUT, 1)[-1].split(grading.END_TEST_OUTPUT, 1)[0]
    found = {test: status.value for test, status in parser(between).items()}
    # the lists name a pytest id with spaces by SWE-bench's key, its first word; Polar's parser records both
    return {t: s for t, s in found.items() if " " not in t or t.split(" ", 1)[0] not in found}


_PASS = {"PASSED", "XFAIL"}


def derive(manifest: Path, runtime: Any) -> dict[str, tuple[list[str], list[str]]]:
    """SWE-bench's validation in the image: FAIL_TO_PASS fail before the gold patch and pass after it, PASS_TO_PASS
    pass both times (the test patch applied both times)."""
    from polar_cli.swe.evaluate import EvalOptions, evaluate_instance
    from polar_cli.swe.manifest import load_manifest

    found = {}
    for instance in load_manifest(manifest):
        options = EvalOptions(image=instance.image or "", run_empty=True)
        before = evaluate_instance(runtime, instance, "", options).log
        after = evaluate_instance(runtime, instance, instance.patch, options).log
        was = _statuses(before, instance.repo)
        now = _statuses(after, instance.repo)
        f2p = sorted(t for t, s in now.items() if s in _PASS and was.get(t) not in _PASS)
        p2p = sorted(t for t, s in now.items() if s in _PASS and was.get(t) in _PASS)
        found[instance.instance_id] = (f2p, p2p)
        print(f"{instance.instance_id}: {len(f2p)} FAIL_TO_PASS, {len(p2p)} PASS_TO_PASS, {len(now)} tests run")
    return found


def write_lists(found: Mapping[str, tuple[list[str], list[str]]], path: Path = SPECS) -> None:
    rows = json.loads(path.read_text())
    for spec in rows:
        if spec["instance_id"] in found:
            spec["fail_to_pass"], spec["pass_to_pass"] = found[spec["instance_id"]]
    path.write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str]) -> int:
    """``prepare`` (the default), or ``derive``: prepare, build, write FAIL_TO_PASS / PASS_TO_PASS into the specs."""
    manifest = prepare()
    print(manifest)
    if argv[:1] == ["derive"]:
        from polar_cli.runtime.docker import DockerRuntime
        from polar_cli.swe.images import build_instance_images

        runtime = DockerRuntime()
        build_instance_images(manifest, runtime)
        write_lists(derive(manifest, runtime))
        print(prepare())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

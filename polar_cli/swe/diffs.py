"""What a unified diff touches: the files to reset before a test patch, and the test files to run."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

# SWE-bench does not pass these to the test runner even when the test patch touches them ("csv" has no dot there too)
NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")

_GIT_HEADER = re.compile(r'^diff --git ("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$')
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_DEV_NULL = "/dev/null"


@dataclass(frozen=True, slots=True)
class FileChange:
    old: str | None  # None: the patch creates the file
    new: str | None  # None: the patch deletes the file


def _unquote(path: str) -> str:
    # git quotes paths with unusual bytes as C strings with octal escapes: "a/caf\303\251.py"
    if len(path) >= 2 and path.startswith('"') and path.endswith('"'):
        return codecs.escape_decode(path[1:-1].encode("ascii", "backslashreplace"))[0].decode("utf-8", "replace")
    return path


def _strip_prefix(path: str) -> str | None:
    path = _unquote(path.split("\t", 1)[0].rstrip())
    if path == _DEV_NULL:
        return None
    return path[2:] if path.startswith(("a/", "b/")) else path


def file_changes(patch: str) -> list[FileChange]:
    """Each file section of ``patch``, in order; hunk bodies are skipped by their line counts, so a removed line
    that starts with "-- " is never mistaken for a file header."""
    changes: list[FileChange] = []
    old: str | None = None
    new: str | None = None
    in_section = False
    seen_names = False  # this section's "--- / +++" pair was read: another pair starts a new (plain diff) section
    lines = patch.splitlines()
    i = 0

    def close() -> None:
        if in_section and (old is not None or new is not None):
            changes.append(FileChange(old, new))

    while i < len(lines):
        line = lines[i]
        header = _GIT_HEADER.match(line)
        hunk = _HUNK.match(line)
        if header:
            close()
            in_section, seen_names = True, False
            old, new = _strip_prefix(header.group(1)), _strip_prefix(header.group(2))
        elif line.startswith("new file mode"):
            old = None
        elif line.startswith("deleted file mode"):
            new = None
        elif line.startswith("rename from "):
            old = line[len("rename from ") :]
        elif line.startswith("rename to "):
            new = line[len("rename to ") :]
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            if not in_section or seen_names:
                close()
                in_section = True
            seen_names = True
            old, new = _strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])
            i += 1
        elif hunk:
            old_count = int(hunk.group(1) or 1)
            new_count = int(hunk.group(2) or 1)
            i += 1
            while i < len(lines) and (old_count > 0 or new_count > 0):
                body = lines[i]
                if body.startswith("-"):
                    old_count -= 1
                elif body.startswith("+"):
                    new_count -= 1
                elif not body.startswith("\\"):
                    old_count -= 1
                    new_count -= 1
                i += 1
            continue
        i += 1
    close()
    return changes


def touched_paths(patch: str) -> list[str]:
    """Every path the patch reads or writes (old and new names), deduplicated, in order."""
    paths: dict[str, None] = {}
    for change in file_changes(patch):
        for path in (change.old, change.new):
            if path is not None:
                paths[path] = None
    return list(paths)


def runner_targets(test_patch: str) -> list[str]:
    """The files a test patch leaves behind that the runner should run, as SWE-bench picks them."""
    directives: dict[str, None] = {}
    for change in file_changes(test_patch):
        if change.new is not None and not change.new.endswith(NON_TEST_EXTS):
            directives[change.new] = None
    return list(directives)

"""What a unified diff touches: the files to reset before a test patch, the test files to run, and each file's
section of the patch as exact text (to drop some files' changes and keep the rest byte for byte)."""

from __future__ import annotations

import codecs
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

# SWE-bench does not pass these to the test runner even when the test patch touches them ("csv" has no dot there too)
NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")

_GIT_HEADER = re.compile(r'^diff --git ("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$')
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
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


def _bare(line: str) -> str:
    """A line without its ending, for matching headers (a patch saved with CRLF endings still parses)."""
    return line.rstrip("\n").removesuffix("\r")


def _lines(text: str) -> list[str]:
    """``text`` cut after each "\\n", line endings kept: git splits patches on "\\n" alone, so a form feed or a
    U+2028 inside a line (which `str.splitlines` would cut at) stays part of its line."""
    lines = text.split("\n")
    last = lines.pop()
    return [line + "\n" for line in lines] + ([last] if last else [])


@dataclass(frozen=True, slots=True)
class FileDiff:
    """One file's section of a patch: what it changes, and its exact text (header to the line before the next)."""

    change: FileChange
    text: str


@dataclass(frozen=True, slots=True)
class Hunk:
    """One ``@@ -old_start,old_count +new_start,new_count @@`` hunk; ``lines`` keep their first character
    (" " context, "-" removed, "+" added, "\\" no newline at end of file) without the line ending."""

    old_start: int
    old_count: int
    lines: tuple[str, ...]


def split_patch(patch: str) -> tuple[str, list[FileDiff]]:
    """The text before the first file section, and each file section in order; joined back they are ``patch``
    byte for byte. Hunk bodies are skipped by their line counts, so a removed line that starts with "-- " is never
    mistaken for a file header."""
    lines = _lines(patch)
    starts: list[int] = []  # the line each section starts at
    changes: list[FileChange | None] = []  # None: a section that names no file (kept with the text before it)
    old: str | None = None
    new: str | None = None
    in_section = False
    seen_names = False  # this section's "--- / +++" pair was read: another pair starts a new (plain diff) section
    i = 0

    def close() -> None:
        if in_section:
            changes.append(FileChange(old, new) if old is not None or new is not None else None)

    while i < len(lines):
        line = _bare(lines[i])
        header = _GIT_HEADER.match(line)
        hunk = _HUNK.match(line)
        if header:
            close()
            in_section, seen_names = True, False
            starts.append(i)
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
                starts.append(i)
            seen_names = True
            old, new = _strip_prefix(line[4:]), _strip_prefix(_bare(lines[i + 1])[4:])
            i += 1
        elif hunk:
            i = _skip_body(lines, i + 1, int(hunk.group(2) or 1), int(hunk.group(4) or 1))
            continue
        i += 1
    close()
    bounds = [*starts, len(lines)]
    preamble = "".join(lines[: bounds[0]])
    diffs: list[FileDiff] = []
    for k, change in enumerate(changes):
        text = "".join(lines[bounds[k] : bounds[k + 1]])
        if change is not None:
            diffs.append(FileDiff(change, text))
        elif diffs:
            diffs[-1] = FileDiff(diffs[-1].change, diffs[-1].text + text)
        else:
            preamble += text
    return preamble, diffs


def _skip_body(lines: Sequence[str], i: int, old_count: int, new_count: int) -> int:
    """The index after a hunk body that starts at ``i`` and holds ``old_count`` old and ``new_count`` new lines."""
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
    return i


def hunks(section: str) -> list[Hunk]:
    """The hunks of one file section (`FileDiff.text`), with their bodies."""
    lines = _lines(section)
    found: list[Hunk] = []
    i = 0
    while i < len(lines):
        match = _HUNK.match(lines[i])
        if match is None:
            i += 1
            continue
        old_start, old_count = int(match.group(1)), int(match.group(2) or 1)
        end = _skip_body(lines, i + 1, old_count, int(match.group(4) or 1))
        # "\\ No newline" after the last body line belongs to the hunk
        while end < len(lines) and lines[end].startswith("\\"):
            end += 1
        found.append(Hunk(old_start, old_count, tuple(line.rstrip("\n") for line in lines[i + 1 : end])))
        i = end
    return found


@dataclass(frozen=True, slots=True)
class Patch:
    """A unified diff parsed once (`split_patch`), to hand to everything that reads it: the tamper check, the apply
    script, the test runner's targets. ``preamble`` + each file's ``text`` is ``text`` byte for byte."""

    text: str
    preamble: str
    files: tuple[FileDiff, ...]

    @classmethod
    def parse(cls, text: str) -> Patch:
        preamble, files = split_patch(text)
        return cls(text, preamble, tuple(files))

    @classmethod
    def of(cls, patch: str | Patch) -> Patch:
        """``patch`` as it is when already parsed, else parsed."""
        return patch if isinstance(patch, Patch) else cls.parse(patch)

    def touched_paths(self) -> list[str]:
        """Every path the patch reads or writes (old and new names), deduplicated, in order."""
        paths: dict[str, None] = {}
        for diff in self.files:
            for path in (diff.change.old, diff.change.new):
                if path is not None:
                    paths[path] = None
        return list(paths)

    def runner_targets(self) -> list[str]:
        """The files a test patch leaves behind that the runner should run, as SWE-bench picks them."""
        directives: dict[str, None] = {}
        for diff in self.files:
            new = diff.change.new
            if new is not None and not new.endswith(NON_TEST_EXTS):
                directives[new] = None
        return list(directives)

    def without(self, paths: Collection[str]) -> Patch:
        """This patch without the sections of the files named in ``paths`` (either name of a rename); every other
        section, and the text before the first, stays byte for byte."""
        drop = set(paths)
        kept = tuple(d for d in self.files if not ({d.change.old, d.change.new} & drop))
        return Patch(self.preamble + "".join(d.text for d in kept), self.preamble, kept)


def file_changes(patch: str | Patch) -> list[FileChange]:
    """Each file section of ``patch``, in order (`split_patch`)."""
    return [diff.change for diff in Patch.of(patch).files]


def touched_paths(patch: str | Patch) -> list[str]:
    """Every path the patch reads or writes (old and new names), deduplicated, in order."""
    return Patch.of(patch).touched_paths()


def runner_targets(test_patch: str | Patch) -> list[str]:
    """The files a test patch leaves behind that the runner should run, as SWE-bench picks them."""
    return Patch.of(test_patch).runner_targets()

from __future__ import annotations

from polar_cli.swe.diffs import FileChange, file_changes, hunks, runner_targets, touched_paths

GIT_PATCH = """\
diff --git a/src/app.py b/src/app.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,3 +1,3 @@
 import os
--- a/not/a/header.py
+++ b/not/a/header.py
-x = 1
+x = 2
diff --git a/tests/test_new.py b/tests/test_new.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/tests/test_new.py
@@ -0,0 +1 @@
+def test_new(): pass
diff --git a/tests/old.py b/tests/old.py
deleted file mode 100644
index 4444444..0000000
--- a/tests/old.py
+++ /dev/null
@@ -1 +0,0 @@
-x = 1
diff --git a/tests/data/cases.json b/tests/data/cases.json
index 5555555..6666666 100644
--- a/tests/data/cases.json
+++ b/tests/data/cases.json
@@ -1 +1 @@
-[]
+[1]
diff --git a/a.py b/b.py
similarity index 100%
rename from a.py
rename to b.py
diff --git "a/caf\\303\\251.py" "b/caf\\303\\251.py"
index 7777777..8888888 100644
--- "a/caf\\303\\251.py"
+++ "b/caf\\303\\251.py"
@@ -1 +1 @@
-a
+b
"""


def test_sections_of_a_git_patch() -> None:
    assert file_changes(GIT_PATCH) == [
        FileChange("src/app.py", "src/app.py"),
        FileChange(None, "tests/test_new.py"),
        FileChange("tests/old.py", None),
        FileChange("tests/data/cases.json", "tests/data/cases.json"),
        FileChange("a.py", "b.py"),
        FileChange("café.py", "café.py"),
    ]


def test_touched_paths_include_both_names_of_a_rename() -> None:
    assert touched_paths(GIT_PATCH) == [
        "src/app.py",
        "tests/test_new.py",
        "tests/old.py",
        "tests/data/cases.json",
        "a.py",
        "b.py",
        "café.py",
    ]


def test_runner_targets_skip_data_files_and_deleted_files() -> None:
    assert runner_targets(GIT_PATCH) == ["src/app.py", "tests/test_new.py", "b.py", "café.py"]


def test_plain_unified_diff_without_git_headers() -> None:
    patch = """\
--- a/one.py\t2024-01-01 00:00:00
+++ b/one.py\t2024-01-01 00:00:00
@@ -1 +1 @@
-a
+b
--- a/two.py
+++ b/two.py
@@ -1,2 +1,2 @@
 keep
-a
+b
"""
    assert file_changes(patch) == [FileChange("one.py", "one.py"), FileChange("two.py", "two.py")]


def test_empty_patch_touches_nothing() -> None:
    assert file_changes("") == []
    assert touched_paths("\n") == []


def test_split_patch_keeps_every_byte_and_reads_the_hunks() -> None:
    from polar_cli.swe.diffs import split_patch

    no_newline = (
        "From 1 Mon Sep 17 00:00:00 2001\nSubject: x\n\n"
        "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n"
        " keep\x0c\n-old\n\\ No newline at end of file\n"
        "+new\n\\ No newline at end of file\n-- \n2.40.0\n"
    )
    for patch in (GIT_PATCH, no_newline):
        preamble, diffs = split_patch(patch)
        assert preamble + "".join(d.text for d in diffs) == patch
    preamble, (diff,) = split_patch(no_newline)
    assert preamble.startswith("From 1") and diff.text.endswith("2.40.0\n")
    (hunk,) = hunks(diff.text)
    assert (hunk.old_start, hunk.old_count) == (1, 2)
    assert hunk.lines == (" keep\x0c", "-old", "\\ No newline at end of file", "+new", "\\ No newline at end of file")

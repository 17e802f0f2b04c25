"""The five test statuses SWE-bench's parsers emit (its ``TestStatus``)."""

from __future__ import annotations

from enum import StrEnum


class TestStatus(StrEnum):
    __test__ = False  # not a pytest test class, despite the name

    PASSED = "PASSED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"

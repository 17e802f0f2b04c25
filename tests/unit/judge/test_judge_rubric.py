"""Rubric files: the documented format, its hash of the file's bytes, every malformed rubric a ConfigError."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from polar_cli.errors import ConfigError
from polar_cli.judge.rubric import load_rubric, parse_rubric
from tests.unit.judge.judge_support import RUBRIC_YAML


def test_a_rubric_reads_names_descriptions_weights_and_hashes_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "rubric.yaml"
    path.write_bytes(RUBRIC_YAML)
    rubric = load_rubric(path)
    assert rubric.names == ("correctness", "process") and rubric.scale == 10 and rubric.name == "demo"
    assert [c.weight for c in rubric.criteria] == [3.0, 1.0]
    assert rubric.criteria[0].description == "The change fixes the issue the task describes."
    assert rubric.sha256 == hashlib.sha256(RUBRIC_YAML).hexdigest()
    # one byte more (a comment) is another rubric file, another hash
    assert parse_rubric(RUBRIC_YAML + b"# v2\n").sha256 != rubric.sha256


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"criteria: []", "non-empty list"),
        (b"[1, 2]", "expected a mapping"),
        (b"criteria: [{name: a, description: x}, {name: a, description: y}]", "used twice"),
        (b"criteria: [{name: a, description: x, weight: 0}]", "above 0"),
        (b"criteria: [{name: a, description: x, weight: true}]", "above 0"),
        (b"criteria: [{name: a, description: x, weight: .nan}]", "above 0"),
        (b"criteria: [{name: a, description: ''}]", "description"),
        (b"criteria: [{name: 'Bad Name', description: x}]", "name must match"),
        (b"criteria: [{name: a, description: x, points: 3}]", "unknown keys"),
        (b"scale: 0\ncriteria: [{name: a, description: x}]", "scale"),
        (b"rubrik: 1\ncriteria: [{name: a, description: x}]", "unknown keys"),
        (b"criteria: [{name: a", "not valid YAML"),
        (b"\xff\xfe", "not valid YAML"),
    ],
)
def test_a_malformed_rubric_is_a_config_error(text: bytes, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_rubric(text)


def test_a_missing_rubric_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rubric"):
        load_rubric(tmp_path / "absent.yaml")

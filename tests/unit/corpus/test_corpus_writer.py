from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polar_cli.corpus import (
    CorpusWriter,
    JsonlAppender,
    finalize_parquet,
    infer_schema,
    read_jsonl,
    repair_tail,
    write_corpus,
)

ROWS: list[dict[str, Any]] = [
    {"id": "a", "reward": None, "ids": [], "meta": {"end": "full"}, "messages": [{"role": "user", "content": "x"}]},
    {"id": "b", "reward": 1, "ids": [1, 2], "meta": {"end": "truncated", "why": "retry"}, "messages": []},
    {"id": "c", "reward": 0.5, "ids": [3], "meta": {}, "messages": [{"role": "tool", "tool_call_id": "t"}]},
]


def test_appender_writes_whole_lines_and_counts_rows(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    with JsonlAppender(path) as out:
        out.append({"a": 1})
        out.append({"a": 2})
        assert out.rows == 2
    assert path.read_bytes() == b'{"a":1}\n{"a":2}\n'
    with JsonlAppender(path, fsync=True) as out:
        assert out.rows == 2
        out.append({"a": 3})
    assert [r["a"] for r in read_jsonl(path)] == [1, 2, 3]


def test_reopening_cuts_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":2}\n{"a":')
    assert [r["a"] for r in read_jsonl(path)] == [1, 2]
    with JsonlAppender(path) as out:
        assert out.rows == 2
        out.append({"a": 3})
    assert path.read_bytes() == b'{"a":1}\n{"a":2}\n{"a":3}\n'


def test_repair_cuts_newline_terminated_garbage_after_power_loss(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"a":1}\n\x00\x00\x00\n\x00\x00')
    assert repair_tail(path) == 1
    assert path.read_bytes() == b'{"a":1}\n'


def test_repair_reads_long_lines_back_across_chunks(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    big = orjson.dumps({"ids": list(range(400_000))}) + b"\n"  # > 1 MiB, more than one backward chunk
    path.write_bytes(big + big + b'{"ids": [1')
    assert repair_tail(path) == 2
    assert path.read_bytes() == big + big
    path.write_bytes(b"no newline at all")
    assert repair_tail(path) == 0
    assert path.read_bytes() == b""


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_corpus_loads_with_datasets(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"corpus{suffix}"
    assert write_corpus(path, ROWS) == 3
    kind = "json" if suffix == ".jsonl" else "parquet"
    ds = datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    assert ds["id"] == ["a", "b", "c"]
    assert ds["reward"] == [None, 1.0, 0.5]
    assert ds["ids"] == [[], [1, 2], [3]]
    assert ds[1]["meta"]["why"] == "retry"
    assert ds[2]["messages"][0]["tool_call_id"] == "t"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_parquet_schema_is_unified_across_batches(tmp_path: Path) -> None:
    jsonl = tmp_path / "rows.jsonl"
    with JsonlAppender(jsonl) as out:
        for row in ROWS:
            out.append(row)
    # one row per batch: every batch infers a different schema
    schema = infer_schema(jsonl, batch_bytes=1)
    assert schema is not None
    assert schema.field("reward").type == pa.float64()
    assert schema.field("ids").type == pa.list_(pa.int64())
    assert {f.name for f in schema.field("meta").type} == {"end", "why"}
    out_path = tmp_path / "c.parquet"
    assert finalize_parquet(jsonl, out_path, batch_bytes=1) == 3
    table = pq.read_table(out_path)
    assert table.num_rows == 3
    assert pq.ParquetFile(out_path).metadata.num_row_groups == 3
    assert table.column("meta").to_pylist()[0] == {"end": "full", "why": None}


def test_empty_parquet_needs_a_schema(tmp_path: Path) -> None:
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_bytes(b"")
    with pytest.raises(ValueError, match="no rows"):
        finalize_parquet(jsonl, tmp_path / "c.parquet")
    schema = pa.schema([("id", pa.string())])
    assert finalize_parquet(jsonl, tmp_path / "c.parquet", schema=schema) == 0
    assert pq.read_table(tmp_path / "c.parquet").schema == schema


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"corpus{suffix}"
    write_corpus(path, ROWS[:1])
    before = path.read_bytes()

    def rows() -> Any:
        yield ROWS[1]
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError), CorpusWriter(path) as out:
        out.extend(rows())
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_corpus_writer_refuses_other_suffixes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.jsonl or \.parquet"):
        CorpusWriter(tmp_path / "c.csv")

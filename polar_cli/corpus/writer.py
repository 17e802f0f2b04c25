"""Corpus files: JSONL (orjson) and Parquet (pyarrow), never left half-written.

Two ways in:

- `JsonlAppender` appends one row at a time to a JSONL file, each row as one whole line in one write(2). A process
  killed mid-write leaves at most a torn last line; reopening the file cuts it off (the "checked tail") before the
  next append, so a resumable run (``polar generate``) loses at most the row it was writing.
- `CorpusWriter` writes a whole corpus all-or-nothing: rows stream into a hidden JSONL next to the target, and
  `CorpusWriter.commit` turns it into the target by ``os.replace`` (JSONL) or through `finalize_parquet` (Parquet).
  Until then the target is untouched; on error the temporary file is removed.

`finalize_parquet` reads a JSONL file twice in bounded batches: once to unify the Arrow schema over all rows (a
column that is null in early rows and a string later, struct fields present in some rows only), once to write row
groups under that schema. The output loads with ``datasets.load_dataset("parquet", data_files=...)`` and the JSONL
with ``datasets.load_dataset("json", data_files=...)``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from polar_cli.fileio import append_whole

SUFFIXES = (".jsonl", ".parquet")
# rows per Parquet batch are bounded by their JSON size, so memory stays flat however long the rows are
BATCH_BYTES = 32 * 1024 * 1024


class JsonlAppender:
    """Appends rows to a JSONL file, one whole line per write, after cutting off a torn last line.

    ``rows`` counts the complete rows in the file (those found on open plus those appended). ``fsync`` makes each
    row durable before `append` returns (for power loss, not just a killed process).
    """

    def __init__(self, path: Path, *, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self.rows = repair_tail(path) if path.exists() else 0
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, row: Mapping[str, Any]) -> None:
        """One whole line, or nothing: a write that fails part-way (no space) is cut back off before it raises
        (`errors.DiskFull` when the disk is full)."""
        if self._fd is None:
            raise ValueError(f"{self.path}: appender is closed")
        append_whole(self._fd, orjson.dumps(row) + b"\n", self.path)
        if self.fsync:
            os.fsync(self._fd)
        self.rows += 1

    def append_many(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Several rows as one write: all of them, or none (a group that must not be split, such as the segment
        rows of one session; a kill mid-write can still tear it, which its reader repairs: `drop_last_lines`)."""
        if self._fd is None:
            raise ValueError(f"{self.path}: appender is closed")
        append_whole(self._fd, b"".join(orjson.dumps(row) + b"\n" for row in rows), self.path)
        if self.fsync:
            os.fsync(self._fd)
        self.rows += len(rows)

    def drop_last(self, n: int) -> None:
        """Cut the last ``n`` complete rows off the file (a group a kill left incomplete)."""
        if self._fd is None:
            raise ValueError(f"{self.path}: appender is closed")
        drop_last_lines(self.path, n)
        self.rows -= n

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def repair_tail(path: Path) -> int:
    """Cut a torn last line off a JSONL file; return how many complete rows remain.

    A line is complete when it ends with a newline and parses: after power loss a file can end in a newline-terminated
    line of garbage (zero-filled blocks), which is cut as well. Only the tail is read back; rows are counted in chunks.
    """
    with path.open("r+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        end = _rfind_newline(fh, size) + 1
        while end:
            start = _rfind_newline(fh, end - 1) + 1
            fh.seek(start)
            try:
                orjson.loads(fh.read(end - start))
                break
            except orjson.JSONDecodeError:
                end = start
        if end != size:
            fh.truncate(end)
        fh.seek(0)
        rows = 0
        while chunk := fh.read(min(_CHUNK, end - fh.tell())):
            rows += chunk.count(b"\n")
        return rows


_CHUNK = 1 << 20


def drop_last_lines(path: Path, n: int) -> None:
    """Truncate a file whose last line is complete to before its last ``n`` lines."""
    with path.open("r+b") as fh:
        end = fh.seek(0, os.SEEK_END)
        for _ in range(n):
            end = _rfind_newline(fh, end - 1) + 1 if end else 0
        fh.truncate(end)


def _rfind_newline(fh: BinaryIO, before: int) -> int:
    """Offset of the last newline in the file's first ``before`` bytes, or -1, reading backwards in chunks."""
    pos = before
    while pos > 0:
        lo = max(0, pos - _CHUNK)
        fh.seek(lo)
        i = fh.read(pos - lo).rfind(b"\n")
        if i >= 0:
            return lo + i
        pos = lo
    return -1


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The complete rows of a JSONL file (a torn last line is ignored)."""
    with path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                return
            try:
                yield orjson.loads(raw)
            except orjson.JSONDecodeError:
                return


def _batches(path: Path, batch_bytes: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    size = 0
    with path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break
            batch.append(orjson.loads(raw))
            size += len(raw)
            if size >= batch_bytes:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def infer_schema(jsonl: Path, *, batch_bytes: int = BATCH_BYTES) -> pa.Schema | None:
    """One Arrow schema that fits every row of ``jsonl`` (None when it has no rows)."""
    schema: pa.Schema | None = None
    for batch in _batches(jsonl, batch_bytes):
        found = pa.Table.from_pylist(batch).schema
        schema = found if schema is None else pa.unify_schemas([schema, found], promote_options="permissive")
    return schema


def finalize_parquet(
    jsonl: Path, parquet: Path, *, schema: pa.Schema | None = None, batch_bytes: int = BATCH_BYTES
) -> int:
    """Write the rows of ``jsonl`` to ``parquet`` atomically (temp file + rename); return the row count.

    ``schema`` skips inference and lets an empty corpus still get a valid file; without it, zero rows is an error.
    """
    schema = schema if schema is not None else infer_schema(jsonl, batch_bytes=batch_bytes)
    if schema is None:
        raise ValueError(f"{jsonl}: no rows, and no schema given, to write {parquet}")
    rows = 0
    with _replacing(parquet) as tmp, pq.ParquetWriter(tmp, schema) as out:
        for batch in _batches(jsonl, batch_bytes):
            out.write_table(pa.Table.from_pylist(batch, schema=schema))
            rows += len(batch)
    return rows


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CorpusWriter:
    """Writes a corpus to ``path`` (``.jsonl`` or ``.parquet``) all-or-nothing; see the module docstring.

    Use as a context manager: leaving the block normally commits, an exception aborts and leaves ``path`` untouched.
    """

    def __init__(self, path: Path, *, schema: pa.Schema | None = None) -> None:
        if path.suffix not in SUFFIXES:
            raise ValueError(f"{path}: corpus files end in .jsonl or .parquet, not {path.suffix or 'nothing'!r}")
        self.path = path
        self.schema = schema
        self._tmp = path.with_name(f".{path.name}.{os.getpid()}.rows.jsonl")
        self._tmp.unlink(missing_ok=True)
        self._rows = JsonlAppender(self._tmp)

    @property
    def rows(self) -> int:
        return self._rows.rows

    def append(self, row: Mapping[str, Any]) -> None:
        self._rows.append(row)

    def extend(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            self._rows.append(row)

    def commit(self) -> int:
        """Move the rows into place; return how many were written."""
        self._rows.close()
        try:
            if self.path.suffix == ".parquet":
                return finalize_parquet(self._tmp, self.path, schema=self.schema)
            _fsync_file(self._tmp)
            os.replace(self._tmp, self.path)
            return self._rows.rows
        finally:
            self._tmp.unlink(missing_ok=True)

    def abort(self) -> None:
        self._rows.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> CorpusWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def write_corpus(path: Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write ``rows`` to ``path`` (.jsonl or .parquet) all-or-nothing; return the row count."""
    with CorpusWriter(path) as out:
        out.extend(rows)
    return out.rows

"""Corpus files (JSONL, Parquet) written crash-safely: an appender for one row at a time, an all-or-nothing writer."""

from polar_cli.corpus.writer import (
    CorpusWriter,
    JsonlAppender,
    finalize_parquet,
    infer_schema,
    read_jsonl,
    repair_tail,
    write_corpus,
)

__all__ = [
    "CorpusWriter",
    "JsonlAppender",
    "finalize_parquet",
    "infer_schema",
    "read_jsonl",
    "repair_tail",
    "write_corpus",
]

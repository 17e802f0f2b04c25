"""`polar merge-traces`: capture records in, a trajectory corpus (JSONL or Parquet) out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer

from polar_cli.commands.common import FAILED, JsonOpt, exit_codes, fail
from polar_cli.trajectory.merge import DriftPolicy, MergeResult, Strategy, merge_capture
from polar_cli.trajectory.stats import SPLIT_MEANING

_SPLITS_SHOWN = 20


def merge_traces(
    capture_dir: Annotated[Path, typer.Argument(help="Capture directory written by `polar proxy --capture-dir`.")],
    strategy: Annotated[
        Strategy,
        typer.Option(help="per_request: one trace per model call; prefix_merging: one per conversation chain."),
    ],
    out: Annotated[Path, typer.Option(help="Output file: FILE.jsonl or FILE.parquet (written all-or-nothing).")],
    eot_token_id: Annotated[
        int | None,
        typer.Option(help="End-of-turn token id; detected from the first normally stopped call when omitted."),
    ] = None,
    drift: Annotated[
        DriftPolicy,
        typer.Option(
            help="prefix_merging, when the template rendered an answer other than it was sampled: tolerant merges "
            "and keeps the sampled ids (counted in drift_tokens); strict starts a new trace there."
        ),
    ] = DriftPolicy.tolerant,
    as_json: JsonOpt = False,
) -> None:
    """Turn capture records into trainable traces (token ids, loss mask, logprobs, messages + tools)."""
    with exit_codes():
        result = merge_capture(capture_dir, strategy, out, eot_token_id, drift=drift.value)
    if as_json:
        typer.echo(orjson.dumps(result.to_dict()).decode())
    else:
        _print_summary(result)
    if result.rows == 0:
        if as_json:
            raise typer.Exit(FAILED)
        raise fail(f"no trainable calls in {capture_dir}; {out} not written", FAILED)


def _print_summary(result: MergeResult) -> None:
    from rich.console import Console
    from rich.table import Table

    stats = result.stats
    console = Console()
    console.print(
        f"merge-traces ({result.strategy}, drift {result.drift}) -> {result.out}", markup=False, highlight=False
    )
    table = Table(show_header=False)
    table.add_column("stat")
    table.add_column("value", justify="right")
    for key, value in (
        ("rows written", result.rows),
        ("end-of-turn id", result.eot_token_id if result.eot_token_id is not None else "-"),
        ("sessions", stats.sessions),
        ("chains_total", stats.chains_total),
        ("chains_full", stats.chains_full),
        ("chains_truncated", stats.chains_truncated),
        ("completions_total", stats.completions_total),
        ("completions_merged", stats.completions_merged),
        ("completions_skipped", stats.completions_skipped),
        ("conversations", stats.conversations),
        ("merge_rate", "-" if stats.merge_rate is None else f"{stats.merge_rate:.1%}"),
        ("turns_drifted", stats.turns_drifted),
        ("drift_tokens", stats.drift_tokens),
    ):
        table.add_row(key, str(value))
    console.print(table)
    if stats.splits:
        splits = Table(title="why chains split")
        splits.add_column("kind")
        splits.add_column("count", justify="right")
        splits.add_column("meaning")
        for kind, count in sorted(stats.split_counts().items()):
            if count:
                splits.add_row(kind, str(count), SPLIT_MEANING[kind])
        console.print(splits)
        for s in stats.splits[:_SPLITS_SHOWN]:
            line = f"  session {s.session_id} call {s.seq} started trace {s.chain}: {s.kind}{s.where}"
            console.print(line, markup=False, highlight=False)
        if len(stats.splits) > _SPLITS_SHOWN:
            console.print(f"  ... {len(stats.splits) - _SPLITS_SHOWN} more (--json lists all)")
    for reason, count in sorted(stats.skip_counts().items()):
        console.print(f"skipped {count} call(s): {reason}", markup=False, highlight=False)

"""Benchmark how faithfully captured tokens chain (issue 10): real recorded harness sessions through the real Gateway.

Every recorded run (tests/data/harness_requests) with two or more model calls is replayed in seq order through
`Gateway.handle`, in-process (`tests/support/replay.py`): call k's body is the recorded body; the engine answers it
with the assistant turn the harness sent back for it (the recorder's ``done`` where none was sent back, the recorded
injected HTTP error where the recorder failed the call); the recorder's tool-call ids in later bodies are replaced by
the ids the gateway minted. With thinking on, each answer carries a short synthetic reasoning text, which the
harnesses leave out of the history they send back, as in the recordings.

What is simulated: the engine is a template-rendering double (`ScriptedUpstream`: prompt = the real chat template
rendered and encoded, or the gateway's ``input_ids``; sampled ids = `ChatTokenizer.sampled_ids`, the template's
rendering of the answer as the last message), not a model. Answers are the recorded harness's own next turns, so no
harness reacts to anything else. gpt-oss, Gemma 4, Nemotron-3-Super, the Mistral family, GLM-4.6, Kimi-K2 and MiniMax-M2
are tokenised with the Qwen3.5 vocabulary plus their control tokens, DeepSeek-V3.1 and Llama 3.1 with their families'
real vocabularies plus the few control tokens those lack (`tests/support/templates.py`): their templates and rules are
real, the stand-ins' id counts are not. Every template in tests/data/chat_templates is run unless --templates says.

Grid: template x harness x thinking (``chat_template_kwargs.enable_thinking`` off/on) x mode:
  as-sent   reasoning "as-sent": the server renders every prompt from the history as the harness sent it
  reinject  reasoning "reinject" (gateway/reasoning.py): the server renders every prompt
  token-in  reasoning "reinject" + `TokenIn`: a call that continues an earlier one is sent as ids

Per cell: calls (``inj``: the recorder's own injected errors, replayed), failed calls (``ref``: of those, the template
refused the conversation; the rest the double could not answer), continuation pairs (consecutive ok calls where call
k+1's upstream messages continue call k by `find_continuation`, over the pairs the recording holds), pairs that chain
exactly (prompt(k+1) starts with prompt(k) + sampled(k)), drift tokens (the prefix-merging builder's, over merged
turns), traces per session (prefix merging of the capture), and prompt reuse: over continuation pairs, the sum of
common_prefix_len(prompt(k+1), prompt(k) + sampled(k)) over the sum of len(prompt(k+1)), what SGLang's radix cache
could reuse instead of prefilling.

    python scripts/bench_fidelity.py [--templates qwen3.5,gpt-oss] [--harnesses pi,codex] [--modes token-in]
                                     [--json FILE] [--reasons]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polar_cli.capture import CaptureRecord, CaptureWriter, read_session
from polar_cli.capture.ids import common_prefix_len
from polar_cli.capture.store import session_file
from polar_cli.gateway.continuation import Continuation, SampledTurn, TokenIn, answer_message, call_context
from polar_cli.gateway.continuation import find_continuation as _find_continuation
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.probe import with_server_rules
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.inference.tokenizers import ChatTokenizer
from polar_cli.templates import ChatTemplate, TemplateError, detect_traits
from polar_cli.trajectory import prefix_merging
from polar_cli.translate.dialects import SGLANG
from polar_cli.translate.upstream import UpstreamOptions
from tests.support import templates
from tests.support.replay import CallOutcome, RecordedSession, ReplayUpstream, recorded_sessions, replay

MODES = ("as-sent", "reinject", "token-in")
THINKING = (False, True)
# issue 10's targets
TOKEN_IN_EXACT, TOKEN_IN_REUSE = 0.99, 0.99
REINJECT_EXACT, REINJECT_TEMPLATE = 0.95, "qwen3.5"
WINDOW = 12  # ids decoded on each side where a pair stops chaining
COUNTS = ("sessions", "calls", "injected", "failed", "refused", "recorded_pairs", "pairs", "exact", "drift_tokens",
          "pair_drift_tokens", "traces", "reuse_ids", "ceiling_ids", "prompt_ids")  # fmt: skip


@dataclass
class Cell:
    template: str
    harness: str
    thinking: bool
    mode: str
    sessions: int = 0
    calls: int = 0
    injected: int = 0  # answered with the recorder's own injected error
    failed: int = 0  # failed otherwise
    refused: int = 0  # of the failed: the template raised (the rest: the double found no rendering of the answer)
    recorded_pairs: int = 0  # consecutive calls whose recorded histories hold call k's answer right after call k's
    pairs: int = 0  # continuation pairs among consecutive ok calls
    exact: int = 0
    drift_tokens: int = 0  # the builder's (MergeStats.drift_tokens), over merged turns
    pair_drift_tokens: int = 0  # over continuation pairs: sampled ids (end token off) unlike prompt(k+1) there
    traces: int = 0
    reuse_ids: int = 0
    ceiling_ids: int = 0  # len(prompt(k) + sampled(k)) over continuation pairs: the most reuse can be
    prompt_ids: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    not_continued: Counter[str] = field(default_factory=Counter)  # find_continuation's reason, per pair
    token_in_notes: Counter[str] = field(default_factory=Counter)  # the gateway's prompt_note of rendered calls
    not_exact: list[str] = field(default_factory=list)

    def add(self, other: Cell) -> None:
        for name in COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures.update(other.failures)
        self.not_continued.update(other.not_continued)
        self.token_in_notes.update(other.token_in_notes)
        self.not_exact += other.not_exact

    @property
    def exact_share(self) -> float | None:
        return self.exact / self.pairs if self.pairs else None

    @property
    def reuse(self) -> float | None:
        return self.reuse_ids / self.prompt_ids if self.prompt_ids else None

    @property
    def reuse_ceiling(self) -> float | None:
        return self.ceiling_ids / self.prompt_ids if self.prompt_ids else None


@cache
def tokenizer(name: str) -> ChatTokenizer:
    """``templates.tokenizer(name)``, repaired where a case's template variables sit in its ``history_ends`` slot
    (Gemma 4's ``bos_token`` does: its turn ends then hold a tuple, which `TokenIn.turn_end_ids` cannot look up)."""
    tk = templates.tokenizer(name)
    if all(isinstance(t, str) for t in tk.turn_ends):
        return tk
    c = templates.case(name)
    slid: list[Any] = [t for t in c.history_ends if not isinstance(t, str)]  # typed str, holds (name, value) pairs
    variables = dict(c.variables) or dict(slid)
    template = ChatTemplate.from_file(templates.TEMPLATES_DIR / c.file, variables)
    return ChatTokenizer(template, tk.vocab, c.eot_tokens, [t for t in c.history_ends if isinstance(t, str)])


def _turn_end_ids(tk: ChatTokenizer) -> frozenset[int]:
    ids = (tk.vocab.token_id(t) for t in tk.turn_ends)
    return frozenset(i for i in ids if i is not None)


def _answer(record: CaptureRecord) -> dict[str, Any]:
    message = ((record.response or {}).get("choices") or [{}])[0].get("message") or {}
    return answer_message(
        message.get("content") or "", message.get("reasoning_content"), message.get("tool_calls") or []
    )


def _count_calls(
    cell: Cell, session: RecordedSession, outcomes: list[CallOutcome], records: list[CaptureRecord]
) -> None:
    cell.sessions += 1
    cell.calls += len(outcomes)
    cell.injected += sum(o.call.injected_status is not None for o in outcomes)
    cell.recorded_pairs += sum(c.continued for c in session.calls)
    for o in outcomes:
        if o.status != 200 and o.call.injected_status is None:
            refused = isinstance(o.raised, TemplateError)
            kind = "template refused" if refused else "engine double" if o.raised is not None else "gateway"
            cell.failed += 1
            cell.refused += refused
            cell.failures[f"{kind}: {o.error or f'HTTP {o.status}'}"] += 1
    for r in records:  # prompt_mode is None outside token-in mode (and in records from before it existed)
        if getattr(r, "prompt_mode", None) == "rendered" and r.status == "ok":
            cell.token_in_notes[f"{session.harness}: {getattr(r, 'prompt_note', None)}"] += 1


def _count_pairs(cell: Cell, session: RecordedSession, records: list[CaptureRecord], tk: ChatTokenizer) -> None:
    ends = _turn_end_ids(tk)
    ok = [r for r in records if r.status == "ok" and r.prompt_ids]
    for a, b in itertools.pairwise(ok):
        assert a.normalized is not None and b.normalized is not None
        messages = tuple(a.normalized["messages"])
        turn = SampledTurn(messages, call_context(a.normalized), _answer(a), list(a.prompt_ids), a.response_ids)
        found = _find_continuation([turn], b.normalized, ends)
        if not isinstance(found, Continuation):
            cell.not_continued[f"{session.harness}: {found}"] += 1
            continue
        cell.pairs += 1
        joined, prompt = [*a.prompt_ids, *a.response_ids], list(b.prompt_ids)
        shared = common_prefix_len(prompt, joined)
        cell.exact += shared == len(joined)
        cell.reuse_ids += shared
        cell.ceiling_ids += len(joined)
        cell.prompt_ids += len(prompt)
        n = len(a.prompt_ids)
        sampled = a.response_ids[:-1] if a.response_ids and a.response_ids[-1] in ends else a.response_ids
        cell.pair_drift_tokens += sum(n + i >= len(prompt) or prompt[n + i] != t for i, t in enumerate(sampled))
        if shared < len(joined):
            want, got = (tk.vocab.decode(list(ids[shared : shared + WINDOW])) for ids in (joined, prompt))
            how = getattr(b, "prompt_note", None) or getattr(b, "prompt_mode", None) or "rendered"
            cell.not_exact.append(
                f"{session.id} call {session.calls[b.seq].seq}: leaves prompt(k)+sampled(k) at id {shared} of "
                f"{len(joined)}: there k has {want!r}, k+1 {got!r} [{how}]"
            )


def measure(cell: Cell, session: RecordedSession, outcomes: list[CallOutcome], tk: ChatTokenizer, path: Path) -> None:
    """Add one replayed session's figures to ``cell``; ``path`` is its capture file."""
    records = read_session(path)
    _count_calls(cell, session, outcomes, records)
    _count_pairs(cell, session, records, tk)
    build = prefix_merging(records)
    cell.traces += len(build.traces)
    drift = getattr(build.stats, "drift_tokens", None)  # MergeStats has it once the builder counts drift
    cell.drift_tokens += int(drift) if drift is not None else 0


async def _run_cell(cells: dict[str, Cell], sessions: list[RecordedSession], tk: ChatTokenizer, work: Path) -> None:
    some = next(iter(cells.values()))
    upstream = ReplayUpstream(tk)
    registry = SessionRegistry()
    capture = CaptureWriter(work)
    gateway = Gateway(
        upstream=upstream,
        options=UpstreamOptions(
            model="replay",
            chat_template_kwargs={"enable_thinking": some.thinking},
            reasoning="as-sent" if some.mode == "as-sent" else "reinject",
        ),
        sessions=registry,
        capture=capture,
        token_in=TokenIn(tk.template, tk.vocab, tk.turn_ends) if some.mode == "token-in" else None,
        # as-sent is the gateway as it was: no template-safe reshaping either
        traits=None if some.mode == "as-sent" else with_server_rules(detect_traits(tk.template), SGLANG),
    )
    outcomes = {}
    for s in sessions:
        key = f"key-{s.id}"
        registry.open(s.id, key)
        outcomes[s.id] = await replay(gateway, upstream, s, key, thinking=some.thinking)
    capture.close()
    await gateway.close()
    for s in sessions:
        measure(cells[s.harness], s, outcomes[s.id], tk, session_file(work, s.id))


def run_grid(names: Sequence[str], sessions: list[RecordedSession], modes: Sequence[str], work: Path) -> list[Cell]:
    harnesses = sorted({s.harness for s in sessions})
    out: list[Cell] = []
    for name in names:
        tk = tokenizer(name)
        for thinking in THINKING:
            for mode in modes:
                cells = {h: Cell(name, h, thinking, mode) for h in harnesses}
                capture = work / f"{name}-{'on' if thinking else 'off'}-{mode}"
                asyncio.run(_run_cell(cells, sessions, tk, capture))
                out += cells.values()
    return out


# -- output --------------------------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _total(cells: Sequence[Cell], mode: str, thinking: bool | None = None) -> Cell:
    total = Cell(cells[0].template, "*", bool(thinking), mode)
    for c in cells:
        if c.mode == mode and (thinking is None or c.thinking == thinking):
            total.add(c)
    return total


HEADER = (
    f"{'harness':<11} {'think':<5} {'mode':<8} {'calls':>5} {'inj':>3} {'fail':>4} {'ref':>3} {'pairs':>5} "
    f"{'exact':>5} {'exact%':>6} {'drift':>5} {'tr/ses':>6} {'reuse%':>6}"
)


def _row(c: Cell) -> str:
    per_session = c.traces / c.sessions if c.sessions else 0.0
    return (
        f"{c.harness:<11} {'on' if c.thinking else 'off':<5} {c.mode:<8} {c.calls:>5} {c.injected:>3} {c.failed:>4} "
        f"{c.refused:>3} {f'{c.pairs}/{c.recorded_pairs}':>5} {c.exact:>5} {_pct(c.exact_share):>6} "
        f"{c.drift_tokens:>5} {per_session:>6.2f} {_pct(c.reuse):>6}"
    )


def _targets(mine: list[Cell], modes: Sequence[str]) -> list[tuple[str, float | None, float, float | None]]:
    """(target, value, threshold, the as-sent baseline measured in the same run)."""
    base = _total(mine, "as-sent") if "as-sent" in modes else None
    out: list[tuple[str, float | None, float, float | None]] = []
    if "token-in" in modes:
        t = _total(mine, "token-in")
        out.append(("token-in exact >= 99%", t.exact_share, TOKEN_IN_EXACT, base.exact_share if base else None))
        out.append(("token-in reuse >= 99%", t.reuse, TOKEN_IN_REUSE, base.reuse if base else None))
    if "reinject" in modes and mine[0].template == REINJECT_TEMPLATE:
        t = _total(mine, "reinject", thinking=True)
        base_on = _total(mine, "as-sent", thinking=True).exact_share if base else None
        out.append(("reinject exact >= 95%, thinking on", t.exact_share, REINJECT_EXACT, base_on))
    return out


def report(cells: list[Cell], modes: Sequence[str], *, reasons: bool) -> list[dict[str, Any]]:
    """Print a table per template, its summary and targets, the failures; return the verdicts."""
    verdicts: list[dict[str, Any]] = []
    for name in dict.fromkeys(c.template for c in cells):
        mine = [c for c in cells if c.template == name]
        print(f"\n{name}\n{HEADER}")
        for c in sorted(mine, key=lambda c: (c.harness, c.thinking, MODES.index(c.mode))):
            print(_row(c))
        for mode in modes:
            t = _total(mine, mode)
            print(
                f"  {mode:<8} {t.exact}/{t.pairs} continuation pairs exact ({_pct(t.exact_share)}%), prompt reuse "
                f"{_pct(t.reuse)}% (at most {_pct(t.reuse_ceiling)}%); {t.failed} of {t.calls} calls failed "
                f"({t.refused} refused by the template), {t.pairs} of {t.recorded_pairs} recorded pairs measured, "
                f"{t.drift_tokens} drift tokens"
            )
        for label, value, threshold, baseline in _targets(mine, modes):
            verdict = "MISS (no pairs)" if value is None else "PASS" if value >= threshold else "MISS"
            base = "" if "as-sent" not in modes else f" (as-sent baseline {_pct(baseline)}%)"
            print(f"  target {label}: {_pct(value)}% {verdict}{base}")
            verdicts.append({"template": name, "target": label, "value": value, "baseline": baseline,
                             "verdict": verdict.split()[0]})  # fmt: skip
    _print_failures(cells)
    if reasons:
        _print_reasons(cells)
    return verdicts


def _print_failures(cells: list[Cell]) -> None:
    by: dict[tuple[str, str], Counter[str]] = {}
    for c in cells:
        by.setdefault((c.template, c.harness), Counter()).update(c.failures)
    print("\nfailed calls per template x harness (over both thinking settings and every mode):")
    if not any(by.values()):
        print("  none")
    for (template, harness), errors in by.items():
        for error, n in errors.most_common():
            print(f"  {template:<31} {harness:<11} {n:>3}  {error[:160]}")


def _print_reasons(cells: list[Cell]) -> None:
    total: Counter[str] = Counter()
    for c in cells:
        total.update(c.not_continued)
    print("\nconsecutive ok calls that are no continuation (find_continuation's reason, over every cell):")
    for reason, n in total.most_common():
        print(f"  {n:>4}  {reason}")
    print("token-in calls the gateway rendered, by its prompt_note:")
    for name in dict.fromkeys(c.template for c in cells):
        notes: Counter[str] = Counter()
        for c in cells:
            if c.template == name and c.mode == "token-in":
                notes.update(c.token_in_notes)
        for note, n in sorted(notes.items()):
            print(f"  {name:<31} {n:>3}  {note}")
    print("continuation pairs that did not chain exactly:")
    for c in cells:
        for line in c.not_exact:
            print(f"  {c.template:<31} {'on ' if c.thinking else 'off'} {c.mode:<8} {line}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--templates", default=",".join(templates.NAMES), help="comma-separated (default: every one)")
    ap.add_argument("--harnesses", default="", help="comma-separated (default: every recorded one)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    ap.add_argument("--reasons", action="store_true", help="also say why pairs did not continue or chain")
    args = ap.parse_args()
    try:
        names = [templates.case(n).name for n in args.templates.split(",") if n]
    except StopIteration:
        ap.error(f"unknown template in {args.templates}: known are {', '.join(templates.NAMES)}")
    modes = [m for m in args.modes.split(",") if m]
    if bad := [m for m in modes if m not in MODES]:
        ap.error(f"unknown mode(s) {', '.join(bad)}: expected {', '.join(MODES)}")
    sessions = recorded_sessions()
    recorded = sorted({s.harness for s in sessions})
    harnesses = [h for h in args.harnesses.split(",") if h] or recorded
    if bad := [h for h in harnesses if h not in recorded]:
        ap.error(f"unknown harness(es) {', '.join(bad)}: recorded are {', '.join(recorded)}")
    sessions = [s for s in sessions if s.harness in harnesses]
    logging.getLogger("polar").setLevel(logging.CRITICAL)  # refused calls are counted and listed, not logged
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as tmp:
        cells = run_grid(names, sessions, modes, Path(tmp))
    seconds = time.perf_counter() - start
    print(
        f"replayed {len(sessions)} recorded sessions ({sum(len(s.calls) for s in sessions)} calls) x {len(names)} "
        f"templates x {len(THINKING)} thinking x {len(modes)} modes in {seconds:.1f}s"
    )
    verdicts = report(cells, modes, reasons=args.reasons)
    if args.json:
        rows = [
            {**vars(c), "exact_share": c.exact_share, "reuse": c.reuse, "reuse_ceiling": c.reuse_ceiling} for c in cells
        ]
        payload = {"seconds": seconds, "cells": rows, "targets": verdicts}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()

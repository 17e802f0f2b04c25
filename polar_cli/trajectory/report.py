"""Plain-text explanations of a build: which calls merged into which trace, where templates drifted, why chains split.

Meant for humans and for tests against a real chat template: pass the tokenizer's ``decode`` to see the ids that
differ as text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from polar_cli.capture import CaptureRecord
from polar_cli.capture.ids import common_prefix_len, id_list
from polar_cli.trajectory.prefix_merging import drift_tokens
from polar_cli.trajectory.stats import Build

Decode = Callable[[list[int]], str]
_WINDOW = 8


@dataclass(frozen=True, slots=True)
class Drift:
    """Where the next prompt's rendering of call ``seq``'s answer leaves the ids that call sampled.

    ``tokens`` is how many ids the two differ by (`prefix_merging.drift_tokens`).
    """

    seq: int
    next_seq: int
    at: int
    sampled: tuple[int, ...]
    rendered: tuple[int, ...]
    tokens: int


def drifts(build: Build, records: Sequence[CaptureRecord]) -> list[Drift]:
    """Every drifted turn of ``build`` (``metadata["turns_drifted"]``) with the first differing position."""
    by_seq = {r.seq: r for r in records}
    out: list[Drift] = []
    for trace in build.traces:
        eot = trace.metadata.get("eot_token_id")
        drifted = set(trace.metadata.get("turns_drifted", ()))
        for seq, next_seq in zip(trace.seqs, trace.seqs[1:], strict=False):
            if seq not in drifted or not isinstance(eot, int):
                continue
            prev, nxt = by_seq[seq], by_seq[next_seq]
            n = len(prev.prompt_ids)
            rendered = id_list(nxt.prompt_ids[n : nxt.prompt_ids.index(eot, n)])
            sampled = prev.response_ids[:-1] if prev.response_ids[-1] == eot else prev.response_ids
            at = common_prefix_len(sampled, rendered)
            window = tuple(sampled[at : at + _WINDOW]), tuple(rendered[at : at + _WINDOW])
            out.append(Drift(seq, next_seq, at, *window, drift_tokens(sampled, rendered)))
    return out


def explain(build: Build, records: Sequence[CaptureRecord] = (), decode: Decode | None = None) -> str:
    """A few lines per trace, split and skipped call; ``records`` adds drift positions, ``decode`` shows text."""
    show = _shower(decode)
    lines: list[str] = []
    for t in build.traces:
        meta = t.metadata
        end = meta.get("end")
        why = f" ({meta['end_reason']})" if meta.get("end_reason") else ""
        lines.append(
            f"trace {meta.get('chain')}: calls {list(t.seqs)}, {len(t.prompt_ids)} prompt + "
            f"{len(t.response_ids)} response ids ({sum(t.loss_mask)} trainable), started by {meta.get('start')}, "
            f"ended {end}{why}"
        )
        if meta.get("turns_cut"):
            lines.append(f"  cut by max tokens: calls {meta['turns_cut']}")
    for d in drifts(build, records) if records else []:
        lines.append(
            f"  drift: call {d.seq}'s answer as rendered in call {d.next_seq}'s prompt differs at id {d.at} "
            f"({d.tokens} drift tokens): sampled {show(d.sampled)} vs rendered {show(d.rendered)}"
        )
    for s in build.stats.splits:
        lines.append(f"split: call {s.seq} started trace {s.chain}: {s.reason}")
        if s.expected or s.found:
            lines.append(f"  chain had {show(s.expected)}, call has {show(s.found)}")
    for k in build.stats.skips:
        lines.append(f"skipped: call {k.seq}: {k.reason}")
    return "\n".join(lines)


def _shower(decode: Decode | None) -> Callable[[Sequence[int]], str]:
    def show(ids: Sequence[int]) -> str:
        return repr(decode(list(ids))) if decode is not None else str(list(ids))

    return show

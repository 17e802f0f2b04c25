"""Benchmark `polar merge-traces` (issues 3, 10): synthetic agent sessions, stored as the gateway stores them, merged.

Each session is one Qwen-style agent conversation: a ~2K-token system prompt + tools, then 50 calls whose prompts grow
to ~32K tokens (each call: ~200 sampled ids ending in <|im_end|>, then a ~430-token tool result). Records carry
realistic bodies (the harness's Anthropic request and the normalised OpenAI request, both with the whole growing
history, and the upstream answer) and are written with `CaptureWriter`, the gateway's own writer.

Phases (the merge runs in a fresh child process so its peak RSS is its own):
  generate  write the capture directory
  merge     read every session (`read_session_views`), `prefix_merging`, `Trace.to_row`, write JSONL via `CorpusWriter`
  memory    the same pipeline under tracemalloc, against the memory one session's records take when read as lists
  parquet   the same rows to Parquet (size only)
  scaling   read + merge time per stored id for sessions of growing length (~630 ids per call), the path the builders
            take now (`read_session_views`: prompts as views into one buffer per chain) against the old one
            (`read_session`: every prompt rebuilt as a list, then merged) in the same run

"stored tokens" is reported two ways: ids on disk (prompt suffixes + sampled ids, what the compact capture holds)
and ids in the records (every call's full prompt + sampled ids, what `read_session` rebuilds).

    python scripts/bench_merge.py [--sessions 1000] [--calls 50] [--max-prompt 32768] [--dir DIR]
    python scripts/bench_merge.py --calls-sweep 10,50,100,200,400 [--sweep-ids 3000000]    the scaling phase alone

The scaling phase ends with the per-id cost's spread over the session lengths (worst / best, goal <= 1.5x) and the
worst ids on disk per second (goal >= 5M) for each path; "old" is the baseline, measured in the same run.
``--side-requests`` runs it on sessions whose every other call is a title request (one chain each).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from polar_cli.capture import CaptureRecord, CaptureWriter, read_session, read_session_views
from polar_cli.capture.ids import common_prefix_len
from polar_cli.corpus import CorpusWriter
from polar_cli.trajectory import prefix_merging
from polar_cli.trajectory.gcpause import gc_paused

IM_END, IM_START, NL, ASSISTANT, USER = 151645, 151644, 198, 77091, 872
VOCAB = 151643  # ordinary ids only: random text never contains the special ids
SYSTEM_TOKENS = 2000
_TEXT = """the of and to in is that for it with as on be at by this had not are but from or have an they which one
you were all she there would their we him been has when who will no more if out so up said what its about than into
them can only other time new some could these two may first then do any like my now over"""
WORDS = _TEXT.split()
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": " ".join(WORDS[i:] + WORDS[:i]) * 3,
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "what to run"},
                    "timeout": {"type": "integer"},
                },
                "required": ["command"],
            },
        },
    }
    for i, name in enumerate(("Bash", "Read", "Edit", "Write", "Grep", "Glob", "Task", "TodoWrite", "WebFetch", "LS"))
]


def text(rng: random.Random, tokens: int) -> str:
    return " ".join(rng.choices(WORDS, k=tokens))  # ~1 word per token, ~4.5 bytes per token like real code/text


def session_records(sid: str, calls: int, max_prompt: int, rng: random.Random) -> list[CaptureRecord]:
    growth = (max_prompt - SYSTEM_TOKENS) // max(calls - 1, 1)
    prompt = [IM_START, 9125, NL, *rng.choices(range(VOCAB), k=SYSTEM_TOKENS), IM_END, NL, IM_START, ASSISTANT, NL]
    system = text(rng, SYSTEM_TOKENS)
    history: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": "Fix the bug."}]
    harness: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Fix the bug."}]}]
    records = []
    t = 1_700_000_000.0
    for seq in range(calls):
        n_sampled = rng.randrange(100, 300)
        sampled = [*rng.choices(range(VOCAB), k=n_sampled), IM_END]
        logprobs = [-rng.random() * 2 for _ in sampled]
        args = json.dumps({"command": text(rng, 12)})
        reply = {
            "role": "assistant",
            "content": text(rng, n_sampled - 40),
            "reasoning_content": text(rng, 20),
            "tool_calls": [{"id": f"call_{seq}", "type": "function", "function": {"name": "Bash", "arguments": args}}],
        }
        normalized = {
            "model": "qwen3",
            "messages": list(history),
            "tools": TOOLS,
            "stream": False,
            "logprobs": True,
            "return_token_ids": True,
            "max_tokens": 4096,
            "temperature": 0.7,
        }
        request = {
            "model": "claude-sonnet",
            "system": [{"type": "text", "text": system}],
            "messages": list(harness),
            "tools": [
                {
                    "name": x["function"]["name"],
                    "description": x["function"]["description"],
                    "input_schema": x["function"]["parameters"],
                }
                for x in TOOLS
            ],
            "max_tokens": 32000,
            "stream": True,
        }
        response = {
            "id": f"chatcmpl-{sid}-{seq}",
            "object": "chat.completion",
            "created": int(t),
            "model": "qwen3",
            "choices": [{"index": 0, "message": reply, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(sampled)},
        }
        records.append(
            CaptureRecord(
                session_id=sid,
                seq=seq,
                api="anthropic_messages",
                path="/v1/messages",
                started=t,
                ended=t + 3.0,
                status="ok",
                request=request,
                request_headers={"user-agent": "claude-cli/2.1.332", "anthropic-version": "2023-06-01"},
                normalized=normalized,
                response=response,
                prompt_ids=list(prompt),
                response_ids=sampled,
                response_logprobs=logprobs,
                finish_reason="tool_calls",
            )
        )
        t += 5.0
        tool_tokens = max(growth - n_sampled - 12, 10)
        result = text(rng, tool_tokens)
        prompt += [
            *sampled,
            NL,
            IM_START,
            USER,
            NL,
            *rng.choices(range(VOCAB), k=tool_tokens),
            IM_END,
            NL,
            IM_START,
            ASSISTANT,
            NL,
        ]
        history += [
            {**reply, "content": reply["content"]},
            {"role": "tool", "tool_call_id": f"call_{seq}", "content": result},
        ]
        harness += [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": reply["content"]},
                    {"type": "tool_use", "id": f"toolu_{seq}", "name": "Bash", "input": {"command": args}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{seq}", "content": result}]},
        ]
    return records


def with_side_requests(records: list[CaptureRecord], rng: random.Random) -> list[CaptureRecord]:
    """``records`` with a tool-less title request after each call, sharing only the system prompt: every one opens
    its own chain, so a session of n calls holds n / 2 chains (what a harness that titles each turn sends)."""
    out = []
    for i, r in enumerate(records):
        out.append(dataclasses.replace(r, seq=2 * i))
        title = [*r.prompt_ids[: SYSTEM_TOKENS + 3], *rng.choices(range(VOCAB), k=50), IM_END, NL, IM_START, ASSISTANT]
        request = {"messages": [r.normalized["messages"][0], {"role": "user", "content": "A title, please."}]}
        n_sampled = rng.randrange(5, 15)
        out.append(
            dataclasses.replace(
                r,
                seq=2 * i + 1,
                prompt_ids=title,
                normalized={**r.normalized, **request, "tools": []},
                response_ids=[*rng.choices(range(VOCAB), k=n_sampled), IM_END],
                response_logprobs=[-rng.random() for _ in range(n_sampled + 1)],
                finish_reason="stop",
            )
        )
    return out


def generate(capture: Path, sessions: int, calls: int, max_prompt: int, *, side: bool = False) -> dict[str, Any]:
    start = time.perf_counter()
    writer = CaptureWriter(capture)
    disk_ids = record_ids = 0
    for i in range(sessions):
        if side:
            rng = random.Random(i)
            records = with_side_requests(session_records(f"session-{i:05d}", calls // 2, max_prompt, rng), rng)
        else:
            records = session_records(f"session-{i:05d}", calls, max_prompt, random.Random(i))
        recent: list[list[int]] = []
        for r in records:
            writer.write(r)
            # the writer stores a prompt as a suffix of a recent one: count what it shares with the closest of them
            shared = max((common_prefix_len(r.prompt_ids, p) for p in recent), default=0)
            disk_ids += len(r.prompt_ids) - shared + len(r.response_ids)
            record_ids += len(r.prompt_ids) + len(r.response_ids)
            recent = [*recent[-3:], r.prompt_ids]
        if i % 50 == 49:
            writer.flush()  # bound the writer queue
    writer.close()
    files = sorted(capture.glob("*.jsonl"))
    return {
        "seconds": time.perf_counter() - start,
        "disk_ids": disk_ids,
        "record_ids": record_ids,
        "capture_bytes": sum(f.stat().st_size for f in files),
        "largest_file": max(files, key=lambda f: f.stat().st_size).name,
    }


def merge(capture: Path, out: Path) -> dict[str, Any]:
    """The merge pipeline, timed per stage; run in a fresh process so ru_maxrss is this pipeline's."""
    base_rss = _rss_kib("VmRSS")
    read = build = write = 0.0
    traces = 0
    with CorpusWriter(out) as sink:
        for path in sorted(capture.glob("*.jsonl")):
            with gc_paused():  # as `merge_capture` reads and merges each session
                t0 = time.perf_counter()
                records = read_session_views(path)
                t1 = time.perf_counter()
                result = prefix_merging(records, IM_END)
                t2 = time.perf_counter()
                for trace in result.traces:
                    sink.append(trace.to_row())
                t3 = time.perf_counter()
            read, build, write, traces = read + t1 - t0, build + t2 - t1, write + t3 - t2, traces + len(result.traces)
            del records, result
        t4 = time.perf_counter()
    write += time.perf_counter() - t4
    return {
        "read": read,
        "build": build,
        "write": write,
        "traces": traces,
        "maxrss_kib": _rss_kib("VmHWM"),
        "base_rss_kib": base_rss,
    }


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


IDS_PER_CALL = 630
SWEEP = (10, 50, 100, 200, 400)  # calls per session in the scaling phase (issue 27: flat within 1.5x)
READERS = {"old": read_session, "new": read_session_views}


def scaling(work: Path, sizes: tuple[int, ...], ids_per_size: int, *, side: bool = False) -> list[str]:
    """Read + merge time per stored id for sessions of growing length at a fixed ~630 ids per call, old and new path.

    Each size gets about ``ids_per_size`` ids on disk (at least 2 sessions), so long sessions do not take longer to
    generate than short ones. Times are this process's CPU seconds (`time.process_time`), so other load on the
    machine does not count.
    """
    lines = [
        f"scaling (~{IDS_PER_CALL} ids per call, ~{ids_per_size / 1e6:.1f}M ids on disk per size; best of 3, CPU time; "
        "ns per id on disk, read + merge = total):"
    ]
    per_id: dict[str, list[float]] = {name: [] for name in READERS}
    for calls in sizes:
        sessions = max(2, round(ids_per_size / (IDS_PER_CALL * calls)))
        capture = work / f"scale-{calls}"
        shutil.rmtree(capture, ignore_errors=True)
        gen = generate(capture, sessions, calls, SYSTEM_TOKENS + IDS_PER_CALL * (calls - 1), side=side)
        files = sorted(capture.glob("*.jsonl"))
        best: dict[str, tuple[float, float]] = {}
        for path_name, reader in READERS.items():
            read_s = merge_s = float("inf")
            for _ in range(3):  # best of three: the shortest run is the least disturbed by GC and the machine
                reading = merging = 0.0
                for f in files:
                    # the new path as `merge_capture` runs it: each session with the collector paused (`gcpause`)
                    with gc_paused() if path_name == "new" else contextlib.nullcontext():
                        t0 = time.process_time()
                        records = reader(f)
                        t1 = time.process_time()
                        prefix_merging(records, IM_END)
                        reading, merging = reading + t1 - t0, merging + time.process_time() - t1
                        del records
                read_s, merge_s = min(read_s, reading), min(merge_s, merging)
            best[path_name] = read_s, merge_s
        shutil.rmtree(capture)
        disk = gen["disk_ids"]
        cells = []
        for path_name, (read_s, merge_s) in best.items():
            total = read_s + merge_s
            per_id[path_name].append(total / disk)
            cells.append(
                f"{path_name} {1e9 * read_s / disk:5.0f} + {1e9 * merge_s / disk:4.0f} = {1e9 * total / disk:5.0f} ns "
                f"({disk / total / 1e6:5.2f}M ids/s)"
            )
        lines.append(
            f"  {calls:4d} calls x {sessions:4d} sessions ({disk / 1e6:.2f}M ids on disk, "
            f"{gen['record_ids'] / 1e6:6.1f}M in records): " + "; ".join(cells)
        )
    for path_name, costs in per_id.items():
        lines.append(
            f"  {path_name}: per-id cost {1e9 * max(costs):.0f} ns worst / {1e9 * min(costs):.0f} ns best = "
            f"{max(costs) / min(costs):.2f}x across {sizes[0]}-{sizes[-1]} calls (goal <= 1.5x); "
            f"{1 / max(costs) / 1e6:.2f}M ids on disk/s at worst (goal >= 5M)"
        )
    return lines


def memory(capture: Path, out: Path, limit: int) -> dict[str, Any]:
    files = sorted(capture.glob("*.jsonl"))
    largest = max(files, key=lambda f: f.stat().st_size)
    tracemalloc.start()
    records = read_session(largest)
    session_bytes = tracemalloc.get_traced_memory()[0]
    del records
    tracemalloc.stop()
    tracemalloc.start()
    with CorpusWriter(out) as sink:
        for path in files[:limit]:
            for trace in prefix_merging(read_session_views(path), IM_END).traces:
                sink.append(trace.to_row())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"session_bytes": session_bytes, "pipeline_peak": peak, "sessions": min(limit, len(files))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--max-prompt", type=int, default=32768)
    ap.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed afterwards)")
    ap.add_argument("--memory-sessions", type=int, default=50, help="sessions run under tracemalloc")
    ap.add_argument(
        "--calls-sweep",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        help="run only the scaling phase, for these session lengths (calls per session, comma-separated)",
    )
    ap.add_argument("--sweep-ids", type=int, default=3_000_000, help="ids on disk per session length in scaling")
    ap.add_argument(
        "--side-requests",
        action="store_true",
        help="scaling sessions with a title request after every call (half the calls each open a chain)",
    )
    ap.add_argument("--phase", choices=["all", "merge"], default="all", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase == "merge":
        print(json.dumps(merge(args.dir / "capture", args.dir / "traces.jsonl")))
        return
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-merge-"))
    if args.calls_sweep:
        try:
            for line in scaling(work, args.calls_sweep, args.sweep_ids, side=args.side_requests):
                print(line, flush=True)
        finally:
            if args.dir is None:
                shutil.rmtree(work, ignore_errors=True)
        return
    capture = work / "capture"
    shutil.rmtree(capture, ignore_errors=True)
    try:
        gen = generate(capture, args.sessions, args.calls, args.max_prompt)
        print(
            f"generated {args.sessions} sessions x {args.calls} calls in {gen['seconds']:.1f}s: "
            f"{gen['capture_bytes'] / 1e6:.1f} MB capture, {gen['disk_ids'] / 1e6:.2f}M ids on disk, "
            f"{gen['record_ids'] / 1e6:.1f}M ids in records"
        )
        start = time.perf_counter()
        child = subprocess.run(
            [sys.executable, __file__, "--phase", "merge", "--dir", str(work)],
            check=True,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - start
        m = json.loads(child.stdout)
        total = m["read"] + m["build"] + m["write"]
        out_bytes = (work / "traces.jsonl").stat().st_size
        print(
            f"merge: {m['traces']} traces; wall {wall:.2f}s (child process incl. start-up); "
            f"read {m['read']:.2f}s + merge {m['build']:.2f}s + rows/write {m['write']:.2f}s = {total:.2f}s"
        )
        print(
            f"  stored tokens/s, ids on disk:    pipeline {gen['disk_ids'] / total / 1e6:.2f}M/s, "
            f"merge alone {gen['disk_ids'] / m['build'] / 1e6:.2f}M/s"
        )
        print(
            f"  stored tokens/s, ids in records: pipeline {gen['record_ids'] / total / 1e6:.1f}M/s, "
            f"merge alone {gen['record_ids'] / m['build'] / 1e6:.1f}M/s"
        )
        print(
            f"  merge process RSS: {m['base_rss_kib'] / 1024:.0f} MiB after imports, "
            f"peak {m['maxrss_kib'] / 1024:.0f} MiB"
        )
        mem = memory(capture, work / "mem.jsonl", args.memory_sessions)
        print(
            f"memory (tracemalloc, {mem['sessions']} sessions): pipeline peak {mem['pipeline_peak'] / 1e6:.1f} MB, "
            f"largest session's records (as lists) {mem['session_bytes'] / 1e6:.1f} MB -> "
            f"{mem['pipeline_peak'] / mem['session_bytes']:.2f}x (target < 2x)"
        )
        per_session = gen["capture_bytes"] / args.sessions
        parquet = work / "traces.parquet"
        from polar_cli.corpus import finalize_parquet

        finalize_parquet(work / "traces.jsonl", parquet)
        print(
            f"size per session: capture {per_session / 1e3:.0f} KB; merged trajectory JSONL "
            f"{out_bytes / args.sessions / 1e3:.0f} KB ({per_session / (out_bytes / args.sessions):.2f}x), "
            f"Parquet {parquet.stat().st_size / args.sessions / 1e3:.0f} KB "
            f"({per_session / (parquet.stat().st_size / args.sessions):.2f}x) (target capture <= 3x)"
        )
        for line in scaling(work, SWEEP, args.sweep_ids):
            print(line)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Every harness through `polar generate` with ``engine.kind=vllm`` against the REAL vLLM CPU server (issue 13).

For each model (tests/support/real_model.py): the tiny random-weight Qwen3 (real Qwen3 tokenizer and template) with
a 40,960-token context (``qwen3-long``) and at its own 4,096 (``qwen3-4k``: most harnesses' first prompt overflows
it, so this run records what each harness does when the gateway answers a context overflow), and SmolLM2-135M-
Instruct (``smollm2``, 8K, real weights, a template that renders no tools). One vLLM per model, started here; one
`polar generate` of the demo set's first ``--instances`` instances x every harness.

Prints per model the run's wall time, and per harness: sessions, verdicts by reason code, whether every captured prompt
id list equals the server's own ``/tokenize`` of the same normalized request (token-in calls: the server counted
exactly the ids sent, and they extend an earlier call's prompt + answer), calls (refused for context length), exit
codes, seconds in RUN; then, for each session with a refused call, what the harness did next (retries, calls answered
later, exit code, the last line of its output). Needs .venv-vllm, the models (scripts/setup-tests) and the harness
bundles (scripts/setup-docker).

    python scripts/bench_real_model.py [--models qwen3-long,qwen3-4k,smollm2] [--harnesses pi,codex]
        [--instances 1] [--session 180] [--max-tokens 96] [--token-in] [--force-bash] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polar_cli.harness import ADAPTERS
from tests.support import real_model as rm
from tests.support.vllm_server import VLLMServer

MODELS = ("qwen3-long", "qwen3-4k", "smollm2")


def server_for(model: str, logs: Path) -> VLLMServer:
    log = logs / f"vllm-{model}.log"
    if model == "qwen3-long":
        return rm.qwen3_server(rm.QWEN3_LONG_CONTEXT, log_path=log)
    if model == "qwen3-4k":
        return rm.qwen3_server(None, log_path=log)
    if model == "smollm2":
        return rm.smollm2_server(log_path=log)
    raise SystemExit(f"unknown model {model!r}; known: {', '.join(MODELS)}")


def shorten(values: list[int], head: int = 6) -> str:
    return str(values) if len(values) <= head else f"{values[:head]} + {len(values) - head} more"


def bench(model: str, harnesses: list[str], args: argparse.Namespace, work: Path) -> None:
    out = work / model
    out.mkdir(parents=True)
    started = time.monotonic()
    with server_for(model, work) as server:
        print(f"\n## {model}: vLLM ready in {time.monotonic() - started:.0f} s ({server.model_dir.name})", flush=True)
        recipe = work / f"{model}.json"
        rm.write_recipe(
            recipe,
            server,
            harnesses,
            limit=args.instances,
            session_s=args.session,
            max_tokens_cap=args.max_tokens,
            token_in=args.token_in,
            engine=rm.FORCE_BASH if args.force_bash else None,
        )
        timeout = args.session * len(harnesses) * args.instances + 900
        generated = rm.run_generate(recipe, out, timeout)
        by_harness = rm.report(server, out, args.session)
        found = rm.overflows(out)
    rows = rm.rows(out)
    keys = [r["key"] for file_rows in rows.values() for r in file_rows]
    missing = rm.planned_keys(harnesses, args.instances) - set(keys)
    print(
        f"polar generate exit {generated.code}, wall {generated.wall_s:.0f} s; rows: "
        + ", ".join(f"{name} {len(file_rows)}" for name, file_rows in rows.items())
        + f"; duplicate keys {len(keys) - len(set(keys))}; planned keys without a row {len(missing)}"
    )
    if generated.code not in (0, 1):
        print(generated.stderr[-3000:])
    unknown = rm.unknown_reasons(out)
    print(f"reason codes outside REASONS: {unknown or 'none'}")
    print()
    print("| harness | sessions | verdicts | ids == /tokenize | calls (refused) | exit | run s | over timeout |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in harnesses:
        rep = by_harness.get(name)
        if rep is None:
            print(f"| {name} | 0 | (no row) | - | - | - | - | - |")
            continue
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(rep.verdicts.items()))
        run_s = ", ".join(f"{t:.0f}" for t in rep.run_s)
        print(
            f"| {name} | {rep.sessions} | {verdicts} | {rep.ids.line()} | {rep.calls} ({rep.overflow_calls}) "
            f"| {rep.exit_codes} | {run_s} | {', '.join(rep.over_timeout) or 'none'} |"
        )
        for mismatch in rep.ids.mismatches[:3]:
            print(f"    mismatch: {mismatch}")
    if found:
        print("\nafter a context overflow:")
        for o in found:
            print(
                f"- {o.key}: {o.calls} calls, first refused #{o.first_overflow}, {o.overflows} refused "
                f"(messages per refused call {shorten(o.messages)}), {o.later_ok} answered after it, "
                f"exit {o.exit_code}; last output: {o.last_line!r}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--harnesses", default=",".join(ADAPTERS))
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--session", type=float, default=180.0, help="timeouts.session, seconds")
    parser.add_argument("--max-tokens", type=int, default=96, help="engine.max_tokens_cap")
    parser.add_argument("--token-in", action="store_true", help="engine.token_in: continuations go as exact ids")
    parser.add_argument(
        "--force-bash",
        action="store_true",
        help="Qwen3 only: every answer a call of the `bash` tool (Pi, mini-swe-agent), so answers end their turn",
    )
    parser.add_argument("--keep", type=Path, help="keep the run directories here (default: a temporary directory)")
    args = parser.parse_args()
    harnesses = [h for h in args.harnesses.split(",") if h]
    work = args.keep or Path(tempfile.mkdtemp(prefix="polar-bench-real-"))
    try:
        for model in [m for m in args.models.split(",") if m]:
            bench(model, harnesses, args, work)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

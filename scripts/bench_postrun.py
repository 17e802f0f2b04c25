"""Benchmark `polar generate`'s own work per session outside Docker (issue 27.4): INIT and POSTRUN, not the harness.

Each demo instance (recipes/demo/instances.jsonl) is one session of the real `generate.stages.GenerateStages` under
the demo recipe (recipes/demo.yaml: Pi, the gold engine, gateway-only, prefix merging), then its row
(`rows.build_row`). What is simulated: the containers (`tests.support.fake_runtime`: every exec answers at once, the
harness's `git diff` is the gold patch, the evaluation's tests all pass) and the gateway (its session registry; the
session's capture file is written during RUN, untimed, as the gold engine's two calls through Pi would leave it:
system prompt, tools, the patch typed as a heredoc, its result, the final answer). What is real: everything Polar
does in-process: the session spec and harness launch, collecting, reading the capture back, the trajectory build,
the patch parse, the tamper check, the apply and eval scripts, grading, the evaluation's logs, the row.

Per session it reports CPU time (every thread, so the kernel's file system work counts: ``--dir`` picks where the run
directory goes, a tmpfs such as /dev/shm leaves Python's share alone) of INIT, POSTRUN with its parts (`PARTS`) and
the row, best of ``--rounds``, and how often the session's patch and the instance's test patch were parsed
(`diffs.split_patch` calls on each text). ``--per-consumer`` also runs the same sessions the old way (`per_consumer`:
each consumer handed the text parses it again), alternating with the new in the same process, and prints the ratio.
``--profile N`` prints cProfile's top N functions of the new way (steps run inline: cProfile sees one thread).

    .venv/bin/python scripts/bench_postrun.py [--rounds 7] [--repeat 20] [--dir /dev/shm] [--per-consumer]
        [--profile 40]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polar_cli.capture import CaptureRecord, CaptureWriter, read_session_views
from polar_cli.capture.store import session_file
from polar_cli.config import parse_recipe
from polar_cli.generate.rows import build_row
from polar_cli.generate.stages import GenerateStages, SessionPlan
from polar_cli.harness import ADAPTERS
from polar_cli.harness import session as session_module
from polar_cli.harness.collect import COLLECT_FILE
from polar_cli.harness.session import HarnessRun
from polar_cli.inference.gold import GOLD_DONE, Task, apply_patch_command
from polar_cli.node.pools import Job, RunEnd, Timings
from polar_cli.node.session_steps import SessionSteps
from polar_cli.runtime.base import ExecResult
from polar_cli.swe import diffs, evaluate, tamper
from polar_cli.swe.evaluate import Evaluation
from polar_cli.swe.grading import END_TEST_OUTPUT, START_TEST_OUTPUT
from polar_cli.swe.manifest import Instance, load_manifest
from tests.support.fake_runtime import BASE, STRIPPED, FakeContainer, FakeRuntime, collected_tar, result

ROOT = Path(__file__).resolve().parents[1]
MODEL = "Qwen/Qwen3-8B"
EOT = 151645
SYSTEM = "You are an expert coding assistant operating inside pi, a coding agent harness. " * 40
TOOLS = [
    {"type": "function", "function": {"name": n, "description": f"{n} a file or run a command " * 8,
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "command": {"type": "string"}}}}}
    for n in ("read", "bash", "edit", "write")
]  # fmt: skip


def ids(n: int, seed: int) -> list[int]:
    return [(seed * 7919 + i * 31) % 150_000 + 10 for i in range(n)]


def gold_records(session_id: str, instance: Instance, instruction: str) -> list[CaptureRecord]:
    """The two calls gold answers through Pi: the patch as one bash call, then the final answer."""
    command = apply_patch_command(instance.patch, "/testbed")
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
    }
    first: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": instruction}]
    answer: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [call]}
    second = [*first, answer, {"role": "tool", "tool_call_id": "call_1", "content": "Applied patch cleanly.\n"}]
    prompt = ids(len(SYSTEM) // 4 + len(instruction) // 4 + 600, 1)
    response = [*ids(len(command) // 3, 2), EOT]
    prompt2 = [*prompt, *response, *ids(20, 3)]
    final = [*ids(20, 4), EOT]

    def record(
        seq: int, messages: list[dict[str, Any]], prompt_ids: list[int], out: dict[str, Any], rid: list[int]
    ) -> CaptureRecord:
        body = {"model": MODEL, "messages": messages, "tools": TOOLS, "stream": True}
        return CaptureRecord(
            session_id=session_id, seq=seq, api="openai_chat", path="/v1/chat/completions", started=float(seq),
            ended=seq + 0.5, status="ok", request=body, normalized={"messages": messages, "tools": TOOLS},
            response={"choices": [{"message": out, "finish_reason": "stop"}]}, prompt_ids=prompt_ids,
            response_ids=rid, response_logprobs=[-0.1] * len(rid), finish_reason="stop",
            prompt_mode="rendered" if seq == 0 else "token_in",
        )  # fmt: skip

    return [
        record(0, first, prompt, answer, response),
        record(1, second, prompt2, {"role": "assistant", "content": GOLD_DONE}, final),
    ]


class Gateway:
    """What the stages use of the node's gateway; a session's capture file is written during RUN."""

    def __init__(self, capture_dir: Path) -> None:
        self.engine = SimpleNamespace(model=MODEL, upstream=None)
        self.capture = CaptureWriter(capture_dir)
        self.url = "http://127.0.0.1:1"
        self.socket_dir = capture_dir.parent / "socket"
        self.keys = 0

    def open_session(self, session_id: str, task: Task | None, **kw: Any) -> str:
        self.keys += 1
        return f"sk-polar-{self.keys}"

    async def listen_unix(self) -> Path:
        return self.socket_dir

    def close_session(self, key: str) -> None:
        pass

    def records(self, session_id: str) -> list[CaptureRecord]:
        self.capture.flush(session_id)
        path = session_file(self.capture.capture_dir, session_id)
        return read_session_views(path) if path.exists() else []


def responder(instance: Instance) -> Callable[[str, FakeContainer], ExecResult]:
    """A session container whose `git diff` is the gold patch, then an evaluation whose tests all pass."""
    tests = [*instance.fail_to_pass, *instance.pass_to_pass]
    log = "\n".join([START_TEST_OUTPUT, *(f"PASSED {t}" for t in tests), END_TEST_OUTPUT, ">>>>> Test Exit Code: 0\n"])
    collected = collected_tar(instance.patch.encode(), {"root/.pi/agent/sessions/s.jsonl": b"{}\n"})
    answers = {
        "polar-base": result(f"{BASE}\n"),
        "polar-strip": result(STRIPPED),
        "polar-relay": result(""),
        "apply.sh": result(">>>>> Applied Patch (git apply --verbose)\n"),
        "eval.sh": result(log),
    }

    def respond(name: str, container: FakeContainer) -> ExecResult:
        if name == "polar-collect":
            container.files[COLLECT_FILE] = collected
        return answers.get(name, result(""))

    return respond


@contextlib.contextmanager
def per_consumer() -> Iterator[None]:
    """POSTRUN as it was before the patch was parsed once and handed on: every consumer handed the text parses it
    (`Patch.of` parses whatever it is given), `run_job` hands each try the text, and the tamper check splits the test
    command with shlex for every session (`tamper.command_script` uncached)."""
    reparse = classmethod(lambda cls, patch: cls.parse(getattr(patch, "text", patch)))
    with (
        mock.patch.object(diffs.Patch, "of", reparse),
        mock.patch.object(evaluate, "parsed", lambda patch: patch),
        mock.patch.object(tamper, "command_script", tamper.command_script.__wrapped__),
    ):
        yield


class Inline(Executor):
    """Runs each step on the calling thread (for cProfile, which sees one thread)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


class Parses:
    """`diffs.split_patch` calls on each text, counted."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.real = diffs.split_patch

    def __call__(self, patch: str) -> tuple[str, list[diffs.FileDiff]]:
        self.count[patch] = self.count.get(patch, 0) + 1
        return self.real(patch)


class Runtime(FakeRuntime):
    """`FakeRuntime` without its start delay (a `time.sleep(0)` per container, which is the fake's, not Polar's)."""

    def start(self, spec: Any) -> FakeContainer:
        container = FakeContainer(f"c{len(self.started)}", spec, self.respond)
        self.started.append(container)
        return container


# POSTRUN's parts, timed where they run (each on an executor thread, one session at a time)
PARTS = {
    "collect": (session_module, "finish"),  # the patch and the artifacts out of the container, which is removed
    "capture": (Gateway, "records"),  # the session's capture file read back
    "build": (GenerateStages, "_build"),  # its trajectories
    "evaluate": (GenerateStages, "_evaluate"),  # the patch graded (`swe.evaluate.run_job`)
    "eval logs": (GenerateStages, "_write_logs"),  # the evaluation's whole logs (`swe.eval_logs`)
}


@contextlib.contextmanager
def timed_parts(spent: dict[str, float]) -> Iterator[None]:
    """Each of `PARTS` adds its CPU seconds to ``spent``."""

    def timer(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            try:
                return real(*args, **kwargs)
            finally:
                spent[name] += time.process_time() - t0

        return timed

    with contextlib.ExitStack() as stack:
        for name, (owner, attr) in PARTS.items():
            stack.enter_context(mock.patch.object(owner, attr, timer(name, getattr(owner, attr))))
        yield


def sessions(
    work: Path,
    instances: list[Instance],
    repeat: int,
    executor: Executor | None = None,
    profiler: cProfile.Profile | None = None,
) -> dict[str, float]:
    """CPU seconds per session (every thread) of INIT, POSTRUN (and its `PARTS`) and the row over ``repeat`` x every
    instance, one session at a time on one event loop; ``profiler`` sees the timed stretches alone."""

    def on() -> None:
        if profiler is not None:
            profiler.enable()

    def off() -> None:
        if profiler is not None:
            profiler.disable()

    recipe = parse_recipe(yaml.safe_load((ROOT / "recipes" / "demo.yaml").read_text()))
    spent = dict.fromkeys(["init", "postrun", *PARTS, "row"], 0.0)
    run = HarnessRun("ok", 0, b"done\n", 1.0)
    loop = asyncio.new_event_loop()
    with executor or ThreadPoolExecutor(2) as pool, timed_parts(spent):
        gateway = Gateway(work / "capture")
        for k in range(repeat):
            for instance in instances:
                runtime = Runtime(responder(instance), images={"img"})
                stages = GenerateStages(recipe, SessionSteps(runtime, pool), gateway, work, None)  # type: ignore[arg-type]
                plan = SessionPlan(f"{instance.instance_id}::pi::{k}", instance, ADAPTERS["pi"], 1, "img", "b")
                job = Job(plan.key, plan, 600.0)
                on()
                t0 = time.process_time()
                session = loop.run_until_complete(stages.init(job, time.monotonic() + 600))
                t1 = time.process_time()
                off()
                for record in gold_records(session.session_id, instance, stages._instruction(instance)):
                    gateway.capture.write(record)  # RUN: untimed
                gateway.capture.flush()
                on()
                t2 = time.process_time()
                facts = loop.run_until_complete(stages.postrun(job, session, RunEnd("ok", run), Timings()))
                t3 = time.process_time()
                kind, _ = build_row(facts, {})
                t4 = time.process_time()
                off()
                check(facts.evaluation, kind)
                spent["init"] += t1 - t0
                spent["postrun"] += t3 - t2
                spent["row"] += t4 - t3
        gateway.capture.close()
    loop.close()
    n = repeat * len(instances)
    return {k: v / n for k, v in spent.items()}


def check(evaluation: Evaluation | None, kind: str) -> None:
    if evaluation is None or not evaluation.resolved or kind != "accepted":
        raise SystemExit(f"the simulated session was not accepted: {evaluation and evaluation.reason}, {kind}")


def parses_per_session(work: Path, instances: list[Instance]) -> tuple[float, float]:
    """Mean parses per session of the model's patch and of the test patch."""
    counter = Parses()
    with mock.patch.object(diffs, "split_patch", counter):
        sessions(work, instances, 1)
    model = sum(counter.count.get(i.patch, 0) for i in instances) / len(instances)
    tests = sum(counter.count.get(i.test_patch, 0) for i in instances) / len(instances)
    return model, tests


def total(spent: dict[str, float]) -> float:
    return spent["init"] + spent["postrun"] + spent["row"]


def report(name: str, spent: dict[str, float], parses: tuple[float, float], base: dict[str, float] | None) -> None:
    us = {k: 1e6 * v for k, v in spent.items()}
    parts = ", ".join(f"{k} {us[k]:.0f}" for k in PARTS)
    ratio = ""
    if base is not None:
        ratio = f" = {total(spent) / total(base):.2f}x; evaluate {spent['evaluate'] / base['evaluate']:.2f}x"
    print(
        f"{name:12s} INIT {us['init']:5.0f} + POSTRUN {us['postrun']:5.0f} ({parts}) + row {us['row']:4.0f}"
        f" = {1e6 * total(spent):5.0f} us CPU per session{ratio}; parses per session: patch {parses[0]:g},"
        f" test patch {parses[1]:g}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--dir", type=Path, default=None, help="where the run directory goes (default: the temp dir)")
    ap.add_argument("--per-consumer", action="store_true", help="also run the old way (each consumer parses)")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="print cProfile's top N functions")
    args = ap.parse_args()
    instances = load_manifest(ROOT / "recipes" / "demo" / "instances.jsonl")
    modes: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {"parsed once": contextlib.nullcontext}
    if args.per_consumer:
        modes = {"per-consumer": per_consumer, **modes}
    with tempfile.TemporaryDirectory(prefix="polar-bench-postrun-", dir=args.dir) as tmp:
        work = Path(tmp)
        sessions(work, instances, 2)  # warm-up: imports, caches
        best: dict[str, dict[str, float]] = {}
        for _ in range(args.rounds):  # the modes alternate, so drift on the machine hits both alike
            for name, mode in modes.items():
                with mode():
                    got = sessions(work, instances, args.repeat)
                if name not in best or total(got) < total(best[name]):
                    best[name] = got
        for name, mode in modes.items():
            with mode():
                parses = parses_per_session(work, instances)
            base = best["per-consumer"] if args.per_consumer and name != "per-consumer" else None
            report(name, best[name], parses, base)
        if args.profile:
            profiler = cProfile.Profile()
            sessions(work, instances, args.repeat, Inline(), profiler)
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.sort_stats("cumulative").print_stats(args.profile)
            stats.sort_stats("tottime").print_stats(args.profile)
            print(out.getvalue())


if __name__ == "__main__":
    main()

"""A child process for the kill -9 tests: records N big rows through `RunState`, skipping finished keys.

python state_writer.py RUN_DIR N [SLEEP]    prints "ready" once the run directory is open; SLEEP s between rows
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from polar_cli.config import parse_recipe
from polar_cli.generate.state import RunState, Verdict

RECIPE = {"manifest": {"source": "m.jsonl"}, "harnesses": ["pi"], "engine": {"kind": "gold", "tokenizer": "qwen3"}}


def key(i: int) -> str:
    return f"inst-{i}::pi::1"


def row(i: int) -> dict[str, object]:
    return {
        "key": key(i),
        "instance_id": f"inst-{i}",
        "repo": f"org/repo{i % 3}",
        "harness": "pi",
        "attempt": 1,
        "accepted": i % 3 != 0,
        "status": "OK",
        "reason": None if i % 3 else "unresolved: tests failed",
        "stats": {"model_calls": 2, "prompt_tokens": 100, "completion_tokens": 10, "trainable_tokens": 10},
        "timing": {"init": 1.0, "run": 2.0},
        # big rows: a kill lands inside a write(2) often; 1-3 traces, so 1-3 rows written together (Rule 4)
        "traces": [{"prompt_ids": list(range(i, i + 15_000))} for _ in range(1 + i % 3)],
    }


def main() -> None:
    out, n = Path(sys.argv[1]), int(sys.argv[2])
    pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    state = RunState(out, parse_recipe(RECIPE))
    print("ready", flush=True)
    for i in range(n):
        # check before building: a resumed writer must not spend its time rebuilding the big rows it already wrote
        if key(i) in state.finished:
            continue
        r = row(i)
        state.record(Verdict("accepted" if r["accepted"] else "rejected", r))
        time.sleep(pause)
    state.close()


if __name__ == "__main__":
    main()

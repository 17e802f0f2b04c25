"""Benchmark the patch handling of one evaluation (issue 27): POSTRUN's in-process share, without Docker.

For each demo instance (recipes/demo/instances.jsonl, its gold patch as the model's) it runs what
`swe.evaluate.evaluate_instance` does with the patch before the container runs anything: the tamper check's config
paths, the screen, the apply script's paths and the eval script. "per-call" hands every step the patch text (each
step parses it again: the string API, what evaluate did before issue 27); "parsed once" parses the patch and the
test patch once and hands the `diffs.Patch` on (what evaluate does now). Both run in the same process, best of 5.

    .venv/bin/python scripts/bench_patch.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polar_cli.swe.diffs import Patch, touched_paths
from polar_cli.swe.evaluate import instance_eval_script
from polar_cli.swe.manifest import load_manifest
from polar_cli.swe.tamper import config_paths, screen_patch

ROOT = Path(__file__).resolve().parents[1]


def per_call(instance) -> None:  # type: ignore[no-untyped-def]
    config_paths(instance.patch, instance.test_patch)
    kept, _ = screen_patch(
        instance.patch, instance.test_patch, "revert", repo=instance.repo, test_cmd=instance.test_cmd
    )
    touched_paths(kept.text)
    instance_eval_script(instance, "")


def parsed_once(instance) -> None:  # type: ignore[no-untyped-def]
    model, tests = Patch.parse(instance.patch), Patch.parse(instance.test_patch)
    instance_eval_script(instance, "", tests)
    config_paths(model, tests)
    kept, _ = screen_patch(model, tests, "revert", repo=instance.repo, test_cmd=instance.test_cmd)
    kept.touched_paths()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    instances = load_manifest(ROOT / "recipes" / "demo" / "instances.jsonl")
    results = {}
    for name, fn in (("per-call", per_call), ("parsed once", parsed_once)):
        best = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            for _ in range(args.repeat):
                for instance in instances:
                    fn(instance)
            best = min(best, time.process_time() - t0)
        results[name] = 1e6 * best / (args.repeat * len(instances))
    base = results["per-call"]
    for name, us in results.items():
        print(f"{name:12s} {us:7.1f} us per evaluation ({us / base:.2f}x of per-call, the baseline in this run)")


if __name__ == "__main__":
    main()

"""Benchmark: what an SFT corpus keeps of sessions that compact and spawn sub-agents, before lineage and after.

    .venv/bin/python -m tests.integration.harness.bench_lineage [--harness pi opencode hermes]

Runs the real harness bundles of `test_compaction_lineage` (an SGLang double on the real Qwen3.5 template that refuses
a call with SGLang's exact context-length 400) and prints issue 22's table per scenario: the task in the root row,
and the sampled ids trained in their own context / only re-sent / absent (`tests.support.sft_accounting`), for the
one-row view a session had before (``before``) and the rows per trace now (``after``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from polar_cli.harness import ADAPTERS
from polar_cli.harness.recovery import recovered
from polar_cli.runtime.bootstrap import BaseRecipe
from polar_cli.runtime.docker import DockerRuntime, connect
from polar_cli.runtime.images import ensure_bundle_container, harness_image_plan, image_names
from polar_cli.trajectory import prefix_merging
from tests.integration.harness.test_compaction_lineage import (
    REFUSE_AT_BY_HARNESS,
    STEPS,
    CompactingDouble,
    SubagentDouble,
    compacting_session,
)
from tests.support import sft_accounting

SCENARIOS = {
    "pi": ("pi", None),
    "opencode": ("opencode", None),
    "hermes": ("hermes", None),
    "opencode sub-agent": ("opencode", False),
    "opencode sub-agent that compacts": ("opencode", True),
    "opencode, compacting twice": ("opencode", None),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", nargs="*", default=list(SCENARIOS), choices=list(SCENARIOS))
    args = parser.parse_args()
    client = connect(timeout=60)
    image = image_names().base(BaseRecipe())
    print("| scenario | status (exit) | lineage | before: task / own / re-sent / absent | after |")
    print("|---|---|---|---|---|")
    with DockerRuntime(client) as runtime:
        for name in args.scenario:
            harness, overflow = SCENARIOS[name]
            bundle = ensure_bundle_container(client, harness_image_plan(harness).tag)
            if overflow is not None:
                double: CompactingDouble = SubagentDouble(overflow=overflow)
            else:
                double = CompactingDouble(REFUSE_AT_BY_HARNESS[harness], compactions=2 if "twice" in name else 1)
            with tempfile.TemporaryDirectory() as tmp:
                outcome, records, _ = compacting_session(runtime, harness, image, bundle, Path(tmp), double)
            build = prefix_merging(records)
            kinds = ", ".join(t.metadata["lineage"]["kind"] for t in build.traces)
            old = sft_accounting.account(records, sft_accounting.before(build), STEPS)
            new = sft_accounting.account(records, sft_accounting.after(build), STEPS)
            status = f"{outcome.status} ({outcome.exit_code})"
            if outcome.status == "harness_error":
                note = recovered(ADAPTERS[harness].recovery, outcome.exit_code, outcome.output.encode(), records)
                status += ", recovered: no harness error" if note else ", a harness error"
            print(f"| {name} | {status} | {kinds} | {old.row()} | {new.row()} |", flush=True)


if __name__ == "__main__":
    main()

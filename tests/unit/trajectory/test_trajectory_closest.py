"""`prefix_merging._closest` reads a split-off chain's common prefix from the chain it is anchored to (issue 27):
on random sessions of side requests, edited histories and extensions it finds what comparing every chain finds."""

from __future__ import annotations

import importlib
import random

import pytest

from polar_cli.capture.ids import common_prefix_len
from tests.unit.trajectory.trajectory_helpers import A, E, call

pm = importlib.import_module("polar_cli.trajectory.prefix_merging")  # the package exports the function


def _session(rng: random.Random, calls: int) -> list:  # type: ignore[type-arg]
    system = [1, *rng.choices(range(20, 30), k=6), E]
    prompts: list[list[int]] = []
    records = []
    for seq in range(calls):
        roll = rng.random()
        if prompts and roll < 0.5:  # extend an earlier prompt: its answer, E, a few ids (often joins a chain)
            base = rng.choice(prompts)
            prompt = [*base, *rng.choices(range(20, 24), k=rng.randrange(0, 3)), E, 7, A]
        elif prompts and roll < 0.7:  # keep part of an earlier prompt, then go elsewhere (a break or a side call)
            base = rng.choice(prompts)
            prompt = [*base[: rng.randrange(1, len(base) + 1)], *rng.choices(range(20, 24), k=3), A]
        else:  # a side request: the system prompt, then its own question
            prompt = [*system, *rng.choices(range(20, 24), k=rng.randrange(1, 4)), A]
        prompts.append(prompt)
        records.append(call(seq, prompt, [*rng.choices(range(20, 24), k=2), E]))
    return records


def _direct(prompt, c, shared):  # type: ignore[no-untyped-def]
    return common_prefix_len(prompt, c.last.prompt_ids)


@pytest.mark.parametrize("seed", range(40))
def test_anchored_prefixes_split_as_comparing_every_chain(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _session(random.Random(seed), 60)
    anchored = pm.prefix_merging(records, E)
    monkeypatch.setattr(pm, "_shared_with", _direct)
    direct = pm.prefix_merging(records, E)
    assert anchored.stats == direct.stats
    assert [t.to_row() for t in anchored.traces] == [t.to_row() for t in direct.traces]
    assert any(s.kind == "side_request" for s in direct.stats.splits)
    assert any(s.kind == "prefix_break" for s in direct.stats.splits)

"""A job source that work keeps coming into (the rollout service's queue, a cluster node's feed): `StagePools.run`
iterates it, and is told to `feed` again when more has come."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Generic, TypeVar

from polar_cli.node.pools import Job

T = TypeVar("T")


class Feed(ABC, Generic[T]):
    """An iterator of `Job`s that never ends for good: it raises StopIteration while empty and yields again later.
    A subclass holds the jobs and picks the next (`__len__`, `_pop`)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def _pop(self) -> Job[T]:
        """Take out the next job; there is one."""

    def __iter__(self) -> Iterator[Job[T]]:
        return self

    def __next__(self) -> Job[T]:
        if not len(self):
            raise StopIteration
        return self._pop()

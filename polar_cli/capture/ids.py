"""Prompt ids as the capture stores them: `PromptView`s of a buffer shared along a chain, and the prefix comparison
the merger and the gateway run on them (at the speed of slice comparison)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any, ClassVar, overload


def common_prefix_len(a: Sequence[Any], b: Sequence[Any], start: int = 0) -> int:
    """Length of the longest common prefix of two sequences (lists, bytes), at the speed of slice comparison.

    Blocks are compared in order, then the first differing block is bisected: linear in the prefix, with every
    comparison done in C. ``start`` is a length the caller knows the two share (``a[:start] == b[:start]``): the
    comparison begins there.
    """
    n = min(len(a), len(b))
    if isinstance(a, PromptView) and a.shares_buffer(b):
        return n
    step = COMPARE_BLOCK
    i = min(start, n)
    while i < n:
        j = min(n, i + step)
        if a[i:j] != b[i:j]:
            lo, hi = i, j  # invariant: a[:lo] == b[:lo] and a[lo:hi] != b[lo:hi]
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if a[lo:mid] == b[lo:mid]:
                    lo = mid
                else:
                    hi = mid
            return lo
        i = j
        step *= 2  # long shared histories: fewer, larger comparisons
    return n


# ids compared per slice before the step doubles (also the byte block of `record.common_suffix_len`)
COMPARE_BLOCK = 1024


class PromptView(Sequence[int]):
    """Prompt ids as ``Expander(views=True)`` rebuilds them: the first ``len`` ids of a buffer shared along a chain.

    A view never changes: the buffer is only ever appended to beyond every view's end. Slices are lists. Two views
    of one buffer are prefixes of each other (`shares_buffer`), which is how the merger tells that a call extends a
    chain's last prompt without comparing ids.
    """

    __slots__ = ("_ids", "_len")
    __hash__: ClassVar[None]  # type: ignore[assignment]

    def __init__(self, ids: list[int], length: int | None = None) -> None:
        self._ids = ids
        self._len = len(ids) if length is None else length

    @classmethod
    def extend(cls, base: PromptView | None, prefix: int, suffix: list[int]) -> PromptView:
        """The prompt stored as ``base``'s first ``prefix`` ids, then ``suffix``; ``suffix`` may become the buffer."""
        if base is None or prefix == 0:
            return cls(suffix)
        if prefix > base._len:
            raise ValueError(f"prompt prefix {prefix} is longer than its base prompt ({base._len} ids)")
        ids, end = base._ids, prefix + len(suffix)
        if len(ids) == prefix:  # the base is the longest prompt in its buffer: grow the buffer
            ids += suffix
        elif ids[prefix:end] != suffix:  # a branch (retried, edited or rewound history): a buffer of its own
            ids = ids[:prefix] + suffix
        return cls(ids, end)

    def shares_buffer(self, other: object) -> bool:
        """Whether ``other`` is a view of the same buffer, so that the shorter of the two is a prefix of the other."""
        return isinstance(other, PromptView) and other._ids is self._ids

    def tolist(self) -> list[int]:
        return self._ids[: self._len]

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return self._ids[slice(*index.indices(self._len))]
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise IndexError("prompt index out of range")
        return self._ids[i]

    def __iter__(self) -> Iterator[int]:
        return islice(self._ids, self._len)

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        start, stop, _ = slice(start, stop).indices(self._len)
        return self._ids.index(value, start, stop)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PromptView):
            if self._len != other._len:
                return False
            return other._ids is self._ids or self.tolist() == other.tolist()
        if isinstance(other, list):
            return self._len == len(other) and self.tolist() == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"PromptView({self._len} ids)"


def id_list(ids: Sequence[int]) -> list[int]:
    """``ids`` as a list: a list itself, a copy of a view's ids."""
    if isinstance(ids, list):
        return ids
    return ids.tolist() if isinstance(ids, PromptView) else list(ids)

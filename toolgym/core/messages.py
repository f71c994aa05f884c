"""``MessagesView``: the chat so far, as ``info["messages"]`` hands it out, in O(1) per step.

An env's chat only grows: ``ToolEnv`` appends the assistant's turn and the observation messages to
``trajectory.messages`` and never changes or removes one. A copy of the whole chat in every step's ``info``
made a long episode quadratic (step 500 copied 1,000 messages); a view records the list and its length at that
step instead, so taking one costs the same at turn 1 and at turn 500, and it still reads as that step's
snapshot after later steps appended more.

It is a read-only ``Sequence`` of plain dicts: ``len``, indexing, slicing (a ``list``), iteration, ``==``
against a list, a tuple or another view, ``+`` with a list (a ``list``), pickling. It is not a ``list``:
``json.dumps`` refuses it (``json.dumps(list(view))``), as does code that checks ``isinstance(x, list)``. Each
message it hands out is a fresh shallow copy, so what a caller changes never reaches the trajectory nor the
next reader; ``list(view)`` is the old ``info["messages"]``, a list of copies. Reading every message costs
what the copy used to, once, and only for the caller that reads them all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

Message = dict[str, Any]


class MessagesView(Sequence[Message]):
    """The first ``length`` messages of an append-only ``messages`` list (all of them by default), read-only.

    The view holds the list itself, not a copy: it stays that step's snapshot as long as the list is only
    appended to, which is all ``ToolEnv`` does with ``trajectory.messages``.
    """

    __slots__ = ("_length", "_messages")

    def __init__(self, messages: list[Message], length: int | None = None):
        self._messages = messages
        self._length = len(messages) if length is None else min(max(int(length), 0), len(messages))

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            messages = self._messages
            return [dict(messages[i]) for i in range(*index.indices(self._length))]
        i = index.__index__()
        if i < 0:
            i += self._length
        if not 0 <= i < self._length:
            raise IndexError("message index out of range")
        return dict(self._messages[i])

    def __iter__(self) -> Iterator[Message]:
        messages = self._messages
        for i in range(self._length):
            yield dict(messages[i])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessagesView):
            if other._messages is self._messages:
                return other._length == self._length
        elif not isinstance(other, list | tuple):
            return NotImplemented
        if len(other) != self._length:
            return False
        messages = self._messages
        return all(messages[i] == m for i, m in enumerate(other))

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __add__(self, other: Sequence[Message]) -> list[Message]:
        if not isinstance(other, MessagesView | list | tuple):
            return NotImplemented
        return [*self, *other]

    def __radd__(self, other: Sequence[Message]) -> list[Message]:
        if not isinstance(other, list | tuple):
            return NotImplemented
        return [*other, *self]

    def __repr__(self) -> str:
        return repr(list(self))

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (a vector env's worker, Ray) as its own messages only, not the list it views
        return (MessagesView, ([dict(m) for m in self._messages[: self._length]],))


__all__ = ["MessagesView"]

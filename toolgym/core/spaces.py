"""A text space for LLM observations and actions.

``gymnasium.spaces.Text`` only admits characters from a fixed charset (alphanumerics by default), so real
model output with punctuation, newlines or unicode is "outside" it and ``check_env`` fails. ``AnyText`` admits
any ``str`` up to ``max_length`` characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np
from gymnasium.spaces import Space

_SAMPLE_ALPHABET = tuple(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t<>/()[]{}+-*=.,:;'\"_#éλ中🙂"
)


class AnyText(Space[str]):
    """Any unicode string of at most ``max_length`` characters."""

    def __init__(self, max_length: int = 1_000_000, seed: int | np.random.Generator | None = None):
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        self.max_length = int(max_length)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string (short, mixed characters); used by ``check_env`` and fuzzing."""
        if mask is not None or probability is not None:
            raise NotImplementedError("AnyText.sample does not support masks")
        length = int(self.np_random.integers(0, min(self.max_length, 64) + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_ALPHABET), size=length)
        return "".join(_SAMPLE_ALPHABET[i] for i in idx)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, AnyText) and other.max_length == self.max_length

    def to_jsonable(self, sample_n: Any) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[str]) -> list[str]:
        return list(sample_n)


# -- Gymnasium's async vector envs share observations through shared memory: make AnyText shareable --------
#
# ``gym.make_vec(ID, vectorization_mode="async")`` puts every observation in shared memory by default; without
# these handlers it failed on AnyText (a custom space) unless the user found ``shared_memory=False``. Each env
# gets one slot of a 4-byte length and ``4 * max_length`` bytes of UTF-8 (the most ``max_length`` characters
# can take; Gymnasium's own Text takes the same four bytes per character).

_LENGTH = 4


def _slot_size(space: AnyText) -> int:
    return _LENGTH + 4 * space.max_length


class SharedTexts(Sequence[str]):
    """The envs' observations as they stand in shared memory, read when indexed. Gymnasium reads the buffer
    once, when the vector env is made, and relies on what it got being a live view (numpy arrays are); a
    tuple of strings would stay the first observation forever. A deep copy (what the vector env hands out
    unless ``copy=False``) is a plain tuple of the texts at that moment."""

    def __init__(self, shared_memory: Any, slot_size: int, n: int):
        self._view = memoryview(shared_memory).cast("B")
        self._size, self._n = slot_size, n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._n)))
        if not -self._n <= index < self._n:
            raise IndexError(f"env index {index} out of range for {self._n} envs")
        at = (index % self._n) * self._size
        length = int.from_bytes(self._view[at : at + _LENGTH], "little")
        return bytes(self._view[at + _LENGTH : at + _LENGTH + length]).decode("utf-8")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


def _register_shared_memory() -> None:
    import multiprocessing as mp

    from gymnasium.vector.utils.shared_memory import (
        create_shared_memory,
        read_from_shared_memory,
        write_to_shared_memory,
    )

    @create_shared_memory.register(AnyText)
    def _create(space: AnyText, n: int = 1, ctx: Any = mp) -> Any:
        return ctx.Array("B", n * _slot_size(space), lock=False)

    @read_from_shared_memory.register(AnyText)
    def _read(space: AnyText, shared_memory: Any, n: int = 1) -> SharedTexts:
        return SharedTexts(shared_memory, _slot_size(space), n)

    @write_to_shared_memory.register(AnyText)
    def _write(space: AnyText, index: int, value: str, shared_memory: Any) -> None:
        data = value.encode("utf-8")
        size = _slot_size(space)
        if len(data) > size - _LENGTH:
            raise ValueError(f"an observation of {len(value):,} characters does not fit {space}")
        at = index * size
        view = memoryview(shared_memory).cast("B")
        view[at : at + _LENGTH] = len(data).to_bytes(_LENGTH, "little")
        view[at + _LENGTH : at + _LENGTH + len(data)] = data


_register_shared_memory()

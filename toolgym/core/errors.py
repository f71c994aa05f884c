"""The one error for "no such name" (action format, tool, column, dataset, ...), and its message.

``UnknownNameError`` is a ``ValueError`` (the argument's value is wrong, which is what callers catch) and a
``KeyError`` (what the registries raised first, kept so ``except KeyError`` in user code still works: the
same dual parentage as numpy's ``AxisError``). Unlike a plain ``KeyError`` its message is not quoted.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UnknownNameError(KeyError, ValueError):
    """A name that is not among the known ones; the message names it, the known ones and the fix."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def unknown_name(
    what: str, name: object, known: Iterable[object], fix: str = "", known_as: str = "known"
) -> UnknownNameError:
    """``no <what> named <name> (did you mean <close>?); <known_as>: <known>; <fix>``, ready to raise."""
    choices = [str(k) for k in known]
    close = difflib.get_close_matches(str(name), choices, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    message = f"no {what} named {name!r}{hint}; {known_as}: {', '.join(choices) or 'none'}"
    return UnknownNameError(f"{message}; {fix}" if fix else message)

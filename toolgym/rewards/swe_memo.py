"""The SWE judge's memo: a verdict on a tree judged before in this process is that verdict again.

A verdict is a function of what the judge is given: the base commit's archive, the agent's changes (as
data), the task's tests and test files, the interpreter, the runner and its limits, and the sandbox it runs
in (each sandbox object numbered once: ``sandbox_token``). Trainers hand it the same inputs often: a GRPO
group's samples that change nothing, or that write the same fix, and checks that play one task in every
action format (the env check kit judged SWE-v0 60 times for 9 distinct trees). Each is a sandboxed test run
of seconds; the memo runs each distinct tree once.

What it keeps: verdicts without ``error`` (an infrastructure failure is never remembered: the next call
tries again), at most ``TOOLGYM_SWE_VERDICT_MEMO`` of them (default 4096, least recently used first out;
``0`` turns the memo off). Calls for a tree whose verdict is being made wait for it instead of making it
again. A caller gets its own copy. What an identical tree's tests do differently on a second run (a flaky
test, one near its time limit) is not seen: the first verdict stands for every copy of that tree, as one
verdict of the tree.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from toolgym.core.types import Verdict

log = logging.getLogger(__name__)

#: the environment variable that sizes the memo (``0``: off)
SIZE_ENV = "TOOLGYM_SWE_VERDICT_MEMO"
DEFAULT_SIZE = 4096


def memo_size() -> int:
    """The memo's size from ``TOOLGYM_SWE_VERDICT_MEMO`` (a bad value is an error that says so)."""
    raw = os.environ.get(SIZE_ENV, "").strip()
    if not raw:
        return DEFAULT_SIZE
    try:
        size = int(raw)
    except ValueError:
        raise ValueError(f"{SIZE_ENV} must be a whole number of verdicts (0: off), not {raw!r}") from None
    if size < 0:
        raise ValueError(f"{SIZE_ENV} must be 0 (off) or more, not {size}")
    return size


_tokens = itertools.count(1)
_token_lock = threading.Lock()


def sandbox_token(sandbox: object) -> int | None:
    """A number for ``sandbox`` that no other sandbox of this process gets, not even one made where it was
    (``id()`` is reused: a broken sandbox made after a good one was freed must not get the good one's
    verdicts). None where the object takes no attribute: then its verdicts are not remembered."""
    with _token_lock:
        token = getattr(sandbox, "_toolgym_verdict_memo_token", None)
        if token is None:
            token = next(_tokens)
            try:
                object.__setattr__(sandbox, "_toolgym_verdict_memo_token", token)
            except (AttributeError, TypeError):
                return None
        return int(token)


def verdict_key(parts: dict[str, Any]) -> str:
    """A digest of everything a verdict depends on: ``parts`` is JSON data, with ``bytes`` anywhere in it
    digested on their own (an archive of a real repository is tens of megabytes)."""

    def plain(value: Any) -> Any:
        if isinstance(value, bytes | bytearray | memoryview):
            return {"sha256": hashlib.sha256(value).hexdigest()}
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, set | frozenset):
            return sorted(plain(v) for v in value)
        return value

    text = json.dumps(plain(parts), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


class VerdictMemo:
    """Verdicts by ``verdict_key``, least recently used out first; thread-safe (episodes judge from worker
    threads). ``hits`` and ``misses`` count its answers."""

    def __init__(self) -> None:
        self._verdicts: OrderedDict[str, Verdict] = OrderedDict()
        self._making: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._verdicts)

    def verdict(self, key: str, make: Callable[[], Verdict]) -> Verdict:
        """The remembered verdict for ``key``, else ``make()``'s (remembered when it has no error)."""
        size = memo_size()
        if size == 0:
            return make()
        while True:
            with self._lock:
                known = self._verdicts.get(key)
                if known is not None:
                    self._verdicts.move_to_end(key)
                    self.hits += 1
                    log.debug("SWE verdict %s: judged before in this process", key[:12])
                    return known.model_copy(deep=True)
                making = self._making.get(key)
                if making is None:
                    self._making[key] = threading.Event()
                    self.misses += 1
                    break
            making.wait()  # another caller is judging the same tree: its verdict, or our own try if it failed
        try:
            verdict = make()
            if verdict.error is None:
                with self._lock:
                    self._verdicts[key] = verdict.model_copy(deep=True)
                    while len(self._verdicts) > size:
                        self._verdicts.popitem(last=False)
            return verdict
        finally:
            with self._lock:
                self._making.pop(key).set()


#: the process's memo, shared by every SWE-v0 env and verifier in it
MEMO = VerdictMemo()

__all__ = ["DEFAULT_SIZE", "MEMO", "SIZE_ENV", "VerdictMemo", "memo_size", "sandbox_token", "verdict_key"]

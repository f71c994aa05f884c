"""An ``LLMClient`` that generates the turns of many episodes in rounds, one batch call each, for engines
whose generate call is a collective every rank must take together.

A collective generate (TRL's vLLM backend in server mode or with tensor parallelism: the prompts of every
rank are gathered, one process asks the engine, the outputs are broadcast and sliced back by equal shares)
needs every rank to call it the same number of times with the same number of prompts. Multi-turn episodes
break that: ranks need different numbers of turns.

:class:`LockstepClient` restores it. Episodes call ``generate`` as usual (it is an ``LLMClient``); the driver
waits until every episode still running on this rank waits for a turn, then all ranks exchange how many
prompts they hold, each pads its list to the largest count with a one-token filler prompt, and all call
``batch_generate`` once. A rank whose episodes are all done keeps taking part with filler prompts until no
rank has any. Without a collective backend no exchange is needed and a round is just the batch of turns
waiting.

One batch has one set of sampling settings, so each call asks for the per-turn cap and each turn is then cut
to its own remaining budget, which samples exactly what a smaller ``max_tokens`` would have (decoding is left
to right). Per-episode sampling seeds cannot be given in a batch and are not used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from toolgym.rollout.clients.base import Generation, Sampling
from toolgym.rollout.clients.errors import ClientError

T = TypeVar("T")
#: ``prompts -> (completion ids, logprobs or None)`` per prompt, in order: one collective call
BatchGenerate = Callable[[list[list[int]]], tuple[list[list[int]], list[list[float]] | None]]
#: every rank's value of a local int, in rank order (a collective); ``None``: a single rank
Exchange = Callable[[int], list[int]]


@dataclass(eq=False)
class _Turn:
    prompt_ids: list[int]
    max_tokens: int
    future: asyncio.Future[Generation]


class LockstepClient:
    """An ``LLMClient`` whose turns are generated in rounds by ``batch_generate`` (see the module docstring).

    Run the episodes with :meth:`drive`; ``generate`` may only be awaited by those episodes.
    """

    def __init__(self, batch_generate: BatchGenerate, *, exchange: Exchange | None, filler_id: int):
        self.batch_generate = batch_generate
        self.exchange = exchange
        self.filler_id = int(filler_id)
        self.rounds = 0
        self._pending: list[_Turn] = []
        self._live = 0
        self._changed: asyncio.Event | None = None

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        if self._changed is None:
            raise ClientError("LockstepClient.generate is only for episodes run by LockstepClient.drive")
        turn = _Turn(list(prompt_ids), sampling.max_tokens, asyncio.get_running_loop().create_future())
        self._pending.append(turn)
        self._changed.set()
        return await turn.future

    async def close(self) -> None:
        """Nothing to release: the trainer owns the engine."""

    async def drive(self, episodes: Sequence[Awaitable[T]]) -> list[T]:
        """Run ``episodes`` to the end, generating their turns in rounds; their results in order."""
        self._changed = asyncio.Event()
        self._live = len(episodes)
        tasks = [asyncio.ensure_future(self._tracked(e)) for e in episodes]
        try:
            while True:
                while len(self._pending) < self._live:  # someone is in env.step: wait for it
                    self._changed.clear()
                    await self._changed.wait()
                batch, self._pending = self._pending, []
                counts = self.exchange(len(batch)) if self.exchange is not None else [len(batch)]
                if max(counts) == 0:
                    break
                self._round(batch, max(counts))
                await asyncio.sleep(0)  # let the episodes take their turns before the next check
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()
            self._changed = None

    async def _tracked(self, episode: Awaitable[T]) -> T:
        try:
            return await episode
        finally:
            self._live -= 1
            if self._changed is not None:
                self._changed.set()

    def _round(self, batch: list[_Turn], width: int) -> None:
        prompts = [t.prompt_ids for t in batch] + [[self.filler_id]] * (width - len(batch))
        self.rounds += 1
        try:
            completions, logprobs = self.batch_generate(prompts)
        except Exception as exc:
            for turn in batch:
                turn.future.set_exception(ClientError(f"vLLM generation failed: {type(exc).__name__}: {exc}"))
            return
        for i, turn in enumerate(batch):
            ids = list(completions[i])[: turn.max_tokens]
            lps = None if logprobs is None else [float(x) for x in logprobs[i][: len(ids)]]
            finish = "length" if len(ids) >= turn.max_tokens else "stop"
            turn.future.set_result(Generation(token_ids=ids, logprobs=lps, finish_reason=finish))


__all__ = ["BatchGenerate", "Exchange", "LockstepClient"]

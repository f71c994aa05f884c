"""Fixes verl 0.9.1's experimental asynchronous trainers need, on every platform: ``toolgym train`` has verl
import this module in every process of a ``mode: one_step_off`` or ``mode: fully_async`` run
(``VERL_USE_EXTERNAL_MODULES``, as ``compat.py``), and only there.

- ``verl/experimental/fully_async_policy/fully_async_rollouter.py:600-605`` (``reset_staleness``, after each
  weight sync) lets the paused rollouter go before it resets its count of samples since the sync (an
  ``await`` lies between), so the rollouter, woken, may still see the old count, pause again, and wait for
  its monitor loop, which looks every 10 s (``:1120``): a training step then waits up to 10 s for samples
  nobody generates (9.6 s of a 3-step CPU run here). Once the count is reset, the rollouter resumes at once
  if the monitor loop would.
- ``verl/experimental/fully_async_policy/fully_async_trainer.py:602`` logs the metrics aggregated over a
  weight sync's training steps before it adds the current step's (``_fit_postprocess_step``), so each sync's
  line holds the sync before's steps, under the new version's step, and the last sync's are never logged
  (verl PR #6796 moved the log after it, upstream). The log waits for that step's metrics here.
- ``verl/experimental/one_step_off_policy/ray_trainer.py:50`` builds the trainer without the executor that
  writes ``trainer.rollout_data_dir``'s dumps (``_init_dump_executor``, which the other trainers call), so a
  run that sets it fails at its first step. The trainer gets one.

Each patch names the line it works around and applies to verl ``VERL_VERSION`` only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import verl

from toolgym.trainers.verl_adapter.compat import VERL_VERSION, after_import


def apply_patches() -> None:
    if verl.__version__ != VERL_VERSION:
        return
    after_import("verl.experimental.fully_async_policy.fully_async_rollouter", _resume_after_reset)
    after_import("verl.experimental.fully_async_policy.fully_async_trainer", _log_a_sync_with_its_steps)
    after_import("verl.experimental.one_step_off_policy.ray_trainer", _one_step_off_dump_executor)


def replace_method(cls: Any, name: str, make: Callable[[Any], Any]) -> None:
    """``cls.<name> = make(the method as verl wrote it)``. For a ``@ray.remote`` class, on the class it was
    made from and on the class Ray builds from it (``__ray_metadata__.modified_class``), which holds a
    wrapped copy of every method, made at decoration, that shadows the original's: that class is the one
    Ray pickles for the actor's process, and the one its methods call each other on."""
    original = getattr(getattr(cls, "__ray_actor_class__", cls), name)
    method = make(original)
    metadata = getattr(cls, "__ray_metadata__", None)
    targets = [cls] if metadata is None else [metadata.modified_class, cls.__ray_actor_class__]
    for target in targets:
        setattr(target, name, method)


def _resume_after_reset(module: Any) -> None:
    def make(reset_staleness):
        @functools.wraps(reset_staleness)
        async def reset_and_resume(self):
            timing_raw = await reset_staleness(self)
            # a pause decided on the old count was decided while reset_staleness held the lock, so it is
            # queued for the lock before this (asyncio's lock is first come, first served); then what the
            # monitor loop does, without its wait
            async with self.lock:
                if self.paused and not await self._should_pause_generation():
                    self.paused = False
                    self._resume_event.set()
            return timing_raw

        return reset_and_resume

    replace_method(module.FullyAsyncRollouter, "reset_staleness", make)


def _log_a_sync_with_its_steps(module: Any) -> None:
    trainer = module.FullyAsyncTrainer
    log = trainer.__ray_actor_class__._fit_log_aggregated_training_metrics

    def log_pending(self) -> None:
        pending = self.__dict__.pop("_toolgym_sync_to_log", None)
        if pending is not None:
            log(self, pending)

    def log_later(log):
        @functools.wraps(log)
        def _fit_log_aggregated_training_metrics(self, rollout_reset_timing_raw):
            self._toolgym_sync_to_log = rollout_reset_timing_raw

        return _fit_log_aggregated_training_metrics

    def then_log(postprocess):
        @functools.wraps(postprocess)
        def _fit_postprocess_step(self):
            postprocess(self)  # adds this step's metrics to the sync's aggregate
            log_pending(self)

        return _fit_postprocess_step

    def fit_then_log(fit):
        @functools.wraps(fit)
        async def fit_and_log(self):
            await fit(self)
            log_pending(self)  # fit's own last sync, after its last step's postprocess

        return fit_and_log

    replace_method(trainer, "_fit_log_aggregated_training_metrics", log_later)
    replace_method(trainer, "_fit_postprocess_step", then_log)
    replace_method(trainer, "fit", fit_then_log)


def _one_step_off_dump_executor(module: Any) -> None:
    def make(init):
        @functools.wraps(init)
        def init_with_dump_executor(self, *args, **kwargs):
            init(self, *args, **kwargs)
            if not hasattr(self, "_dump_executor"):
                self._init_dump_executor()

        return init_with_dump_executor

    replace_method(module.OneStepOffRayTrainer, "__init__", make)


apply_patches()

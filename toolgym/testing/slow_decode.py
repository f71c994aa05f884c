"""A vLLM logits processor that only waits: each decode step of the engine takes ``TOOLGYM_SLOW_DECODE_S``
seconds longer (default 0.2), and nothing it samples changes (the logits come back as they went in).

Why: a test that must see a weight sync land in the middle of a generation (verl's partial rollouts,
``tests/trainers/verl/test_train_async_cpu.py``) needs generations that last longer than the few
milliseconds the tiny model takes on a CPU. vLLM loads it by name in its engine process
(``logits_processors=["toolgym.testing.slow_decode:SlowDecode"]``; through verl,
``+actor_rollout_ref.rollout.engine_kwargs.vllm.logits_processors=[...]``). vLLM's logprobs are the model's
(``logprobs_mode`` ``raw_logprobs``, its default), taken before any logits processor.

Where ``TOOLGYM_SLOW_DECODE_COUNTER`` names a file, each step also writes the number of steps so far into it,
so that another process can wait until the engine has sampled (``toolgym.testing.verl_trace.decode_steps``:
it holds a weight sync until a generation in flight has tokens).
"""

from __future__ import annotations

import os
import time
from typing import Any

from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

from toolgym.testing.verl_trace import COUNTER_ENV

DELAY_ENV = "TOOLGYM_SLOW_DECODE_S"
#: the processor's name as vLLM's ``logits_processors`` takes it
QUALNAME = f"{__name__}:SlowDecode"


class SlowDecode(LogitsProcessor):
    """Sleeps once per engine step that samples (``apply``), leaving the logits as they are."""

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        self.delay_s = float(os.environ.get(DELAY_ENV, "0.2"))
        self.counter = os.environ.get(COUNTER_ENV)
        self.steps = 0

    def is_argmax_invariant(self) -> bool:
        # False: vLLM applies it on every step, greedy or not (an argmax-invariant one is skipped for greedy
        # requests); it never changes the logits either way
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        return None

    def apply(self, logits: Any) -> Any:
        time.sleep(self.delay_s)
        self.steps += 1
        if self.counter:
            os.makedirs(os.path.dirname(self.counter) or ".", exist_ok=True)
            partial = f"{self.counter}.{os.getpid()}"
            with open(partial, "w") as out:
                out.write(str(self.steps))
            os.replace(partial, self.counter)  # whole numbers only, for a reader in another process
        return logits


__all__ = ["DELAY_ENV", "QUALNAME", "SlowDecode"]

"""The strongest evidence that masks and rewards are wired right: GRPO through the adapter makes the tiny
model (random weights, CPU) learn toolgym-debug/Probe-v0, and the same run with the observation mask
inverted does not.

The learning run is the Training page's own TRL example (docs/training.md), run as written: its printed reward
curve must climb. (tests/docs/test_docs_examples.py leaves that example to this test, so it trains once.)

In Probe-v0 the rewarded token is the answer, generated after the probe's observation; the loss must be on
the generated tokens (mask 1) and each sample must get its own verdict for the reward to climb from about
0.1. Inverting ``env_mask`` puts the loss on the observation and template tokens instead: a wiring bug of
that kind (or rewards reaching the wrong samples) fails this test instead of passing silently.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.testing.probe import ENV_ENTRY
from toolgym.trainers.trl_adapter import make_rollout_func, prompt_dataset

TRAINING_PAGE = Path(__file__).resolve().parents[3] / "docs" / "training.md"
#: the line that identifies the Training page's example (tests/docs/test_docs_examples.py skips it by this)
EXAMPLE_LINE = "rollout_func=make_rollout_func(ENV_ENTRY, max_tokens_per_turn=1),"
#: that example's settings, which the inverted run copies
STEPS, GROUP, BATCH, LR, MAX_COMPLETION, SEED = 16, 8, 32, 1e-2, 48, 42


def training_page_example() -> str:
    (code,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", TRAINING_PAGE.read_text(), re.DOTALL)
        if EXAMPLE_LINE in b
    ]
    settings = (
        f"num_generations={GROUP},",
        f"per_device_train_batch_size={BATCH},",
        f"max_steps={STEPS},",
        "learning_rate=1e-2,",  # the page's spelling of LR
        f"max_completion_length={MAX_COMPLETION},",
    )
    for setting in settings:
        assert setting in code, f"the inverted run copies the example's {setting!r}: keep them in step"
    return code


def inverted_run(make_trainer) -> list[float]:
    from transformers import TrainerCallback

    rollout = make_rollout_func(ENV_ENTRY, max_tokens_per_turn=1)

    def rollout_func(prompts, trainer):
        out = rollout(prompts, trainer)
        out["env_mask"] = [[1 - m for m in mask] for mask in out["env_mask"]]
        return out

    rewards = []

    class Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                rewards.append(logs["reward"])

    trainer, _ = make_trainer(
        rollout_func,
        prompt_dataset(ENV_ENTRY, 64),
        steps=STEPS,
        group=GROUP,
        batch=BATCH,
        lr=LR,
        max_completion_length=MAX_COMPLETION,
        seed=SEED,
    )
    trainer.add_callback(Record())
    trainer.train()
    return rewards


@pytest.mark.slow
def test_the_training_pages_grpo_example_learns_the_probe_and_an_inverted_mask_does_not(
    make_trainer, tmp_path
):
    proc = subprocess.run(
        [sys.executable, "-c", training_page_example()],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    learned = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    inverted = inverted_run(make_trainer)
    curves = f"the example: {learned}\ninverted: {[round(r, 2) for r in inverted]}"
    assert len(learned) == len(inverted) == STEPS, curves
    assert sum(learned[:2]) / 2 < 0.2, curves  # random weights: about a tenth of the answers score
    assert sum(learned[-3:]) / 3 > 0.6, curves
    assert max(inverted) < 0.35 and sum(inverted[-5:]) / 5 < 0.2, curves

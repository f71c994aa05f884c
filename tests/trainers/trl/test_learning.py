"""The strongest evidence that masks and rewards are wired right: GRPO through the adapter makes the tiny
model (random weights, CPU) learn toolgym-debug/Probe-v0, and the same run with the observation mask
inverted does not.

In Probe-v0 the rewarded token is the answer, generated after the probe's observation; the loss must be on
the generated tokens (mask 1) and each sample must get its own verdict for the reward to climb from about
0.1. Inverting ``env_mask`` puts the loss on the observation and template tokens instead: a wiring bug of
that kind (or rewards reaching the wrong samples) fails this test instead of passing silently.
"""

import pytest

from toolgym.testing.probe import ENV_ENTRY
from toolgym.trainers.trl_adapter import make_rollout_func, prompt_dataset

MAX_STEPS = 30


def _learn(make_trainer, *, invert_mask):
    from transformers import TrainerCallback

    rollout = make_rollout_func(ENV_ENTRY, max_tokens_per_turn=1)

    def rollout_func(prompts, trainer):
        out = rollout(prompts, trainer)
        if invert_mask:
            out["env_mask"] = [[1 - m for m in mask] for mask in out["env_mask"]]
        return out

    rewards = []

    class Stop(TrainerCallback):  # stop once learned: the inverted run must use every step
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                rewards.append(logs["reward"])
                if len(rewards) >= 3 and min(rewards[-3:]) >= 0.9:
                    control.should_training_stop = True

    trainer, _ = make_trainer(
        rollout_func,
        prompt_dataset(ENV_ENTRY, 64, seed=0),
        steps=MAX_STEPS,
        group=8,
        batch=32,
        lr=1e-2,
        max_completion_length=48,
        seed=0,
    )
    trainer.add_callback(Stop())
    trainer.train()
    return rewards


@pytest.mark.slow
def test_grpo_learns_the_probe_env_and_an_inverted_mask_does_not(make_trainer):
    learned = _learn(make_trainer, invert_mask=False)
    inverted = _learn(make_trainer, invert_mask=True)
    curves = f"normal: {[round(r, 2) for r in learned]}\ninverted: {[round(r, 2) for r in inverted]}"
    assert sum(learned[:2]) / 2 < 0.2, curves  # random weights: about a tenth of the answers score
    assert len(learned) < MAX_STEPS and sum(learned[-3:]) / 3 > 0.6, curves
    assert len(inverted) == MAX_STEPS and max(inverted) < 0.35 and sum(inverted[-5:]) / 5 < 0.2, curves

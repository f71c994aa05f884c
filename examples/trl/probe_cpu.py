"""GRPO with TRL on CPU from random weights: the tiny offline model learns toolgym-debug/Probe-v0 in seconds.

Probe-v0 (``toolgym.testing.probe``): the first turn calls a tool, the second answers, and the
answer scores 1.0 when it starts with "s" or "t" (about a tenth of a random model's answers do). The reward
table rises from ~0.1 to ~1.0 within about 20 steps. With ``--invert-mask`` the loss is put on the
observation tokens instead of the generated ones (the bug toolgym's ``env_mask`` prevents): the same run
learns nothing.

    python examples/trl/probe_cpu.py                 # the reward rises
    python examples/trl/probe_cpu.py --invert-mask   # it does not
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--invert-mask", action="store_true", help="train on the observation tokens instead")
    args = parser.parse_args()

    from transformers import AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from toolgym.testing.probe import ENV_ENTRY
    from toolgym.tiny_model import tiny_model_path
    from toolgym.trainers.trl_adapter import env_reward, make_rollout_func, prompt_dataset
    from toolgym.trainers.trl_adapter.launch import reward_table

    model = str(tiny_model_path())  # built locally: a Qwen2-architecture model with random weights
    rollout = make_rollout_func(ENV_ENTRY, max_tokens_per_turn=1)  # one token per turn

    def rollout_func(prompts, trainer):
        out = rollout(prompts, trainer)
        if args.invert_mask:
            out["env_mask"] = [[1 - m for m in mask] for mask in out["env_mask"]]
        return out

    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="toolgym-trl-"),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        num_generations=8,  # a GRPO group: 8 samples of one task
        per_device_train_batch_size=32,  # 4 groups per step
        max_completion_length=48,  # tokens after the prompt: both turns and the observation
        learning_rate=1e-2,  # a 0.4M-parameter model from random weights
        lr_scheduler_type="constant",
        max_steps=args.steps,
        seed=args.seed,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
    )
    table = reward_table()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=config,
        train_dataset=prompt_dataset(ENV_ENTRY, 64, seed=args.seed),
        processing_class=AutoTokenizer.from_pretrained(model),
        rollout_func=rollout_func,
        callbacks=[table],
    )
    trainer.remove_callback(PrinterCallback)  # the table replaces the log dict printed per step
    start = time.perf_counter()
    trainer.train()
    rewards = [row["reward"] for row in table.rows]
    mask = "inverted mask (loss on observations)" if args.invert_mask else "toolgym's mask"
    print(
        f"\n{mask}: mean reward {sum(rewards[:3]) / 3:.2f} over the first 3 steps, "
        f"{sum(rewards[-3:]) / 3:.2f} over the last 3 ({time.perf_counter() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()

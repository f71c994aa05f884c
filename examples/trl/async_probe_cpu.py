"""Asynchronous GRPO (TRL's ``AsyncGRPOTrainer``) on a CPU from random weights: the tiny model learns
toolgym-debug/Probe-v0, generating on a vLLM-CPU server while it trains.

``probe_cpu.py`` with TRL's asynchronous trainer: toolgym's episode runner plays Probe-v0 on the server (a
tool call, its observation, then the answer; the answer scores 1.0 when it starts with "s" or "t"), the
trainer trains on what it already has, and after each step the weights go to the server as a file
(``FileWeightTransfer``). The reward table adds the staleness of the samples each step trained on and the
samples dropped as stale. With ``--invert-mask`` the loss is on the observation tokens instead of the
generated ones: the same run learns nothing.

    python examples/trl/async_probe_cpu.py                 # starts a vLLM server; the reward rises
    python examples/trl/async_probe_cpu.py --invert-mask   # it does not
    python examples/trl/async_probe_cpu.py --server http://127.0.0.1:8000   # your server (dev mode)

The last line printed is the mean reward per step, as a Python list
(``benchmarks/bench_trl_async_learning.py`` reads it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
import warnings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

from toolgym.trainers.trl_adapter.async_rollout import ToolgymRolloutLoop  # noqa: E402


class InvertedMaskLoop(ToolgymRolloutLoop):
    """The control: the loss on the observation and template tokens instead of the generated ones (an
    untrainable episode stays all-zero). Module level: TRL's spawned rollout process imports it from here."""

    def completion_mask(self, sample, traj):
        mask = super().completion_mask(sample, traj)
        return [1 - m for m in mask] if any(mask) else mask


@contextlib.contextmanager
def cpu_server(model: str):
    """vLLM's server on ``model`` on this CPU, in dev mode, with what the async trainer needs."""
    from toolgym.testing.vllm_server import TINY_CPU_ARGS, VLLMServer
    from toolgym.trainers.trl_adapter.async_grpo import CPU_SERVER_ARGS

    os.environ["VLLM_SERVER_DEV_MODE"] = "1"
    args = (*TINY_CPU_ARGS, *CPU_SERVER_ARGS, "--max-num-batched-tokens", "4096")
    with VLLMServer(model, args=args) as server:
        yield server.base_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-staleness", type=int, default=0)
    parser.add_argument(
        "--epsilon-high",
        type=float,
        help="PPO's upper clip (default: the lower one, 0.2); in a stale batch right answers are past 1.2 "
        "after one update at this learning rate, and the clip zeroes their gradient (docs/trl.md)",
    )
    parser.add_argument("--invert-mask", action="store_true", help="train on the observation tokens instead")
    parser.add_argument("--server", help="a vLLM server on the tiny model, in dev mode (default: start one)")
    args = parser.parse_args()

    from transformers import AutoTokenizer, PrinterCallback
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from toolgym.testing.probe import ENV_ENTRY
    from toolgym.tiny_model import tiny_model_path
    from toolgym.trainers.trl_adapter import prompt_dataset
    from toolgym.trainers.trl_adapter.async_grpo import ToolgymAsyncGRPOTrainer
    from toolgym.trainers.trl_adapter.launch import ASYNC_TABLE_COLUMNS, reward_table

    model = str(tiny_model_path())
    with contextlib.ExitStack() as stack:
        url = args.server or stack.enter_context(cpu_server(model))
        config = AsyncGRPOConfig(
            output_dir=tempfile.mkdtemp(prefix="toolgym-trl-async-"),
            use_cpu=True,
            bf16=False,
            gradient_checkpointing=False,
            num_generations=8,  # a GRPO group: 8 samples of one task
            per_device_train_batch_size=32,  # 4 groups per step
            token_budget=0,  # micro-batches of 32 samples
            max_completion_length=48,  # tokens after the prompt: both turns and the observation
            learning_rate=1e-2,  # a 0.4M-parameter model from random weights
            max_steps=args.steps,
            seed=args.seed,
            vllm_server_base_url=url,
            max_staleness=args.max_staleness,
            epsilon_high=args.epsilon_high,
            queue_maxsize=max(args.max_staleness, 1) * 32,  # generate no further ahead than can be trained
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
        )
        table = reward_table(columns=ASYNC_TABLE_COLUMNS)
        trainer = ToolgymAsyncGRPOTrainer(
            model,
            args=config,
            train_dataset=prompt_dataset(ENV_ENTRY, 64, seed=args.seed),
            processing_class=AutoTokenizer.from_pretrained(model),
            callbacks=[table],
            env=ENV_ENTRY,
            max_tokens_per_turn=1,  # one token per turn
            rollout_loop=InvertedMaskLoop if args.invert_mask else ToolgymRolloutLoop,
        )
        trainer.remove_callback(PrinterCallback)  # the table replaces the log dict printed per step
        start = time.perf_counter()
        trainer.train()
    rewards = [row["reward"] for row in table.rows]
    mask = "inverted mask (loss on observations)" if args.invert_mask else "toolgym's mask"
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(
        f"\n{mask}: mean reward {first:.2f} over the first 3 steps, {last:.2f} over the last 3 "
        f"({time.perf_counter() - start:.0f} s); {trainer.stale_dropped} samples dropped as stale"
    )
    print([round(r, 4) for r in rewards])


if __name__ == "__main__":
    main()

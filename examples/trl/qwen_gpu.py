"""GRPO with TRL on one GPU: Qwen2.5-0.5B-Instruct (or 1.5B) learns toolgym/Calculator-v0 with vLLM.

Install (a CUDA machine): ``pip install -e '.[vllm]' trl`` (README, "Train with TRL"). Then:

    python examples/trl/qwen_gpu.py                                        # 0.5B, vLLM colocated
    python examples/trl/qwen_gpu.py --model Qwen/Qwen2.5-1.5B-Instruct --steps 300
    python examples/trl/qwen_gpu.py --no-vllm                              # generate with the HF model

Each step plays 8 tasks x 8 samples (GRPO groups) of up to 4 turns through toolgym's episode runner; the
reward table prints one row per step (reward, success, turns, tool calls, generated tokens). Several GPUs:
``accelerate launch examples/trl/qwen_gpu.py`` (every rank plays its share of the episodes).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    parser.add_argument("--env", default="toolgym/Calculator-v0")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", default="runs/trl-qwen-calculator")
    parser.add_argument(
        "--no-vllm", dest="vllm", action="store_false", help="generate with the trained model"
    )
    args = parser.parse_args()

    from transformers import AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from toolgym.rollout import EnvRequest
    from toolgym.trainers.trl_adapter import env_reward, make_rollout_func, prompt_dataset
    from toolgym.trainers.trl_adapter.launch import reward_table

    env = EnvRequest(id=args.env, kwargs={"max_turns": 4})
    prompt_tokens, response_tokens = 1024, 1024
    config = GRPOConfig(
        output_dir=args.out,
        num_generations=8,  # a GRPO group: 8 samples of one task, one reset
        per_device_train_batch_size=64,  # 8 groups per step
        max_completion_length=response_tokens,  # every turn and observation after the prompt
        learning_rate=1e-6,
        beta=0.0,
        temperature=1.0,
        max_steps=args.steps,
        bf16=True,
        gradient_checkpointing=True,
        use_vllm=args.vllm,
        vllm_mode="colocate",  # vLLM in this process, sharing the GPU
        vllm_gpu_memory_utilization=0.3,
        vllm_max_model_length=prompt_tokens + response_tokens,
        logging_steps=1,
        save_steps=50,
        report_to=[],
        disable_tqdm=True,
    )
    table = reward_table()
    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=env_reward,  # the env's verifier: 1.0 for the exact answer
        args=config,
        train_dataset=prompt_dataset(env, 64 * args.steps, seed=0),  # each row pins its task and seed
        processing_class=AutoTokenizer.from_pretrained(args.model),
        rollout_func=make_rollout_func(
            env, max_tokens_per_turn=256, max_prompt_tokens=prompt_tokens, max_concurrent_episodes=64
        ),
        callbacks=[table],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    trainer.save_model(f"{args.out}/final")


if __name__ == "__main__":
    main()

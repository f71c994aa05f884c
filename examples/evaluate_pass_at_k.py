"""pass@1 and pass@k of a model on an env's fixed evaluation split, with the in-process vLLM engine.

Each of the first ``--tasks`` evaluation tasks is played ``-k`` times; pass@1 is the mean share of passing
samples, pass@k the share of tasks with at least one. The tiny default model (random weights) scores 0, so
the script also scores the env's scripted oracle on the same tasks: a policy that is always right scores 1.

    python examples/evaluate_pass_at_k.py                                  # the tiny model, CPU is fine
    python examples/evaluate_pass_at_k.py --model Qwen/Qwen2.5-1.5B-Instruct --tasks 50 -k 8

The same from the command line: ``toolgym eval --env ID --model M -k 4 --tasks 3 --out report.json``.
"""

import argparse
import asyncio

import gymnasium as gym

from toolgym.rollout import RolloutConfig
from toolgym.rollout.evaluate import EvalReport, evaluate
from toolgym.rollout.models import make_client, make_renderer
from toolgym.testing.scripted import ScriptedClient, oracle_policy

CONFIG = RolloutConfig(max_response_tokens=256, max_tokens_per_turn=64)  # token budgets: episode, turn


def show(name: str, report: EvalReport) -> None:
    print(
        f"{name}: {report.env_id}, {report.tasks} tasks x {report.k} samples  pass@1 {report.pass_at_1:.3f}  "
        f"pass@{report.k} {report.pass_at_k:.3f}  reward {report.reward_mean:.3f}  errors {report.errors}"
    )
    for task in report.per_task:
        print(f"  {task.task_id}: {task.passed}/{task.samples} passed")


async def evaluate_both(client, renderer, env_id: str, k: int, tasks: int) -> tuple[EvalReport, EvalReport]:
    """The model behind ``client``, then the env's oracle, on the same ``tasks`` evaluation tasks."""
    model = await evaluate(env_id, client, renderer, CONFIG, k=k, num_tasks=tasks, progress=False)
    show("model", model)
    probe = gym.make(env_id)
    split = probe.unwrapped.tasks.eval_tasks(tasks)  # the tasks evaluate() played
    probe.close()
    oracle = ScriptedClient(renderer, oracle_policy(env_id, split))  # plays the oracle as an LLM client
    scripted = await evaluate(env_id, oracle, renderer, CONFIG, k=k, num_tasks=tasks, progress=False)
    show("oracle", scripted)
    return model, scripted


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="HF id or path, or tiny (the offline test model)")
    parser.add_argument("--env", default="toolgym/Calculator-v0")
    parser.add_argument("-k", type=int, default=4, help="samples per task")
    parser.add_argument("--tasks", type=int, default=3, help="the first N tasks of the evaluation split")
    args = parser.parse_args(argv)

    async def run() -> None:
        client = make_client(args.model, max_model_len=4096)  # vLLM in this process
        try:
            await evaluate_both(client, make_renderer(args.model), args.env, args.k, args.tasks)
        finally:
            await client.close()

    asyncio.run(run())


if __name__ == "__main__":
    main()

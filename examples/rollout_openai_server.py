"""Roll out toolgym envs against an OpenAI-compatible server (vLLM, SGLang), in GRPO groups.

The server generates; toolgym renders the chat, plays the env and keeps the tokens exactly as sampled
(token-id prompts go to ``/v1/completions``, token ids and logprobs come back). ``--model`` names the
tokenizer and chat template, so it must be the model the server serves.

    python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-0.5B-Instruct --port 8000 &
    python examples/rollout_openai_server.py --server http://127.0.0.1:8000 --model Qwen/Qwen2.5-0.5B-Instruct
    python examples/rollout_openai_server.py     # no --server (nor $TOOLGYM_SERVER): serves the tiny model

The same from the command line: ``toolgym rollout --server URL --model M --env ID --group-size 2``.
"""

import argparse
import asyncio
import contextlib
import os

from toolgym.rollout import RolloutConfig, collect
from toolgym.rollout.models import make_client, make_renderer, resolve_model
from toolgym.testing.vllm_server import VLLMServer


async def rollout(server: str, model: str, env_id: str, episodes: int, group_size: int) -> None:
    client = make_client(model, server=server)  # OpenAICompletionsClient: retries, one pooled connection
    renderer = make_renderer(model)
    config = RolloutConfig(max_response_tokens=128, max_tokens_per_turn=32)  # token budgets: episode, turn
    try:
        trajectories, summary = await collect(
            [env_id], client, renderer, config, tasks_per_env=episodes, group_size=group_size, progress=False
        )
    finally:
        await client.close()
    print(summary.table())
    for t in sorted(trajectories, key=lambda t: (t.group, t.sample)):
        sampled = sum(t.response_mask)  # mask 1: sampled by the model; 0: observation and template tokens
        print(
            f"{t.group} sample {t.sample}: reward {t.reward}  turns {t.num_turns}  stop {t.stop_reason}  "
            f"prompt {len(t.prompt_ids)} tokens, response {len(t.response_ids)} tokens "
            f"({sampled} sampled, {len(t.response_ids) - sampled} observation)  error {t.error}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=os.environ.get("TOOLGYM_SERVER"), help="OpenAI-compatible URL")
    parser.add_argument("--model", default="tiny", help="the served model: HF id or path, or tiny")
    parser.add_argument("--env", default="toolgym/Calculator-v0")
    parser.add_argument("--episodes", type=int, default=2, help="tasks")
    parser.add_argument("--group-size", type=int, default=2, help="samples per task")
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:
        server = args.server
        if server is None:  # start one: `python -m vllm.entrypoints.openai.api_server --model ...`
            vllm = stack.enter_context(VLLMServer(resolve_model(args.model)))
            server = vllm.base_url
            print(f"started vLLM's OpenAI server at {server} in {vllm.startup_s:.0f} s")
        asyncio.run(rollout(server, args.model, args.env, args.episodes, args.group_size))


if __name__ == "__main__":
    main()

"""Scripted episodes: drive an env with a fixed list of tool calls and a final answer.

The tiny local model produces nonsense, so tests and the demo prove each verifier's reward paths with scripted
policies: an env's *oracle* (registered with the env) gives a correct solution, and ``wrong_script`` a wrong
one. Actions are written in the env's own action format by its parser, so the same script exercises every
format. ``ScriptedClient`` plays such a policy behind the LLM-client protocol, so the episode runner and the
trainer adapters can be tested end to end with rewards of 1.0 as well as 0.0.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym

from toolgym.core.registry import ENVS
from toolgym.core.task import Task
from toolgym.core.types import ToolCall, Verdict
from toolgym.envs.base import ToolEnv


@dataclass(frozen=True)
class EpisodeSummary:
    env_id: str
    task_id: str
    reward: float
    turns: int
    tool_calls: int
    tool_errors: int
    terminated: bool
    truncated: bool
    verdict: Verdict | None


def play_script(
    env: gym.Env,
    script: Sequence[ToolCall | str],
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
) -> EpisodeSummary:
    """Reset ``env`` and play ``script`` (ToolCalls, then answer strings) until the episode ends.

    If the script runs out before the episode ends, the episode is reported as it stands (not terminated).
    """
    tool_env = _tool_env(env)
    env.reset(seed=seed, options=options)
    reward: SupportsFloat = 0.0
    terminated = truncated = False
    info: dict[str, Any] = {}
    tool_calls = tool_errors = 0
    for text in script_texts(env, script):
        _, reward, terminated, truncated, info = env.step(text)
        results = info.get("tool_results", [])
        tool_calls += len(results)
        tool_errors += sum(not r.ok for r in results)
        if terminated or truncated:
            break
    assert tool_env.task is not None
    return EpisodeSummary(
        env_id=env.spec.id if env.spec else type(tool_env).__name__,
        task_id=tool_env.task.id,
        reward=float(reward),
        turns=info.get("turn", 0),
        tool_calls=tool_calls,
        tool_errors=tool_errors,
        terminated=terminated,
        truncated=truncated,
        verdict=info.get("verdict"),
    )


def oracle_script(env_id: str, task: Task) -> Sequence[ToolCall | str]:
    """The registered oracle's correct solution for ``task``."""
    spec = ENVS[env_id]
    if spec.oracle is None:
        raise LookupError(f"env {env_id!r} registered no oracle")
    return spec.oracle(task)


def wrong_script(env_id: str, task: Task) -> Sequence[ToolCall | str]:
    """A wrong solution: the env's registered one (an env whose verifier judges the work, not the answer),
    else the oracle's tool calls followed by a wrong final answer."""
    wrong = ENVS[env_id].wrong
    if wrong is not None:
        return wrong(task)
    *calls, _answer = oracle_script(env_id, task)
    return [*calls, "I do not know."]


def script_texts(env: gym.Env, script: Sequence[ToolCall | str]) -> list[str]:
    """The script's steps as the model would write them in ``env``'s action format."""
    parser = _tool_env(env).parser
    return [parser.format_call(s) if isinstance(s, ToolCall) else parser.format_answer(s) for s in script]


#: one function an OpenAI-style request declares (``tools=``), for tests and benchmarks of tool calling
#: through an OpenAI endpoint (the gateway): ``lookup(word)``
LOOKUP_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {
                "type": "object",
                "properties": {"word": {"type": "string"}},
                "required": ["word"],
            },
        },
    }
]

#: ``policy(request_id, turn, prompt_text) -> the text of that turn``
Policy = Callable[[str, int, str], str]


class ScriptedClient:
    """An LLM client that writes a scripted policy's turns: each text tokenized, then the end-of-turn token.

    ``policy`` is a list of texts (answered in order, whatever the episode) or a :data:`Policy` function of
    the episode's session id, its turn number and the decoded prompt (see :func:`oracle_policy`). Logprobs
    are a constant ``-0.5`` (``None`` with ``logprobs=False``). It records every prompt and generation, and
    each call's ``request_id``. ``delay`` seconds pass before each answer, like an engine's latency.
    """

    def __init__(
        self,
        renderer: Any,
        policy: Sequence[str] | Policy,
        *,
        logprobs: bool = True,
        delay: float = 0.0,
    ):
        self.renderer = renderer
        self._texts = list(policy) if not callable(policy) else None
        self._policy = policy if callable(policy) else None
        self.logprobs = logprobs
        self.delay = delay
        # the token the template ends an assistant turn with (e.g. <|im_end|>)
        self.eos_id = renderer.encode(renderer.turn_suffix)[0]
        self.prompts: list[list[int]] = []
        self.generated: list[list[int]] = []
        self.request_ids: list[str] = []
        self._turns: dict[str, int] = defaultdict(int)

    async def generate(self, prompt_ids: list[int], sampling: Any, request_id: str) -> Any:
        from toolgym.rollout.clients.base import Generation

        if self.delay:
            await asyncio.sleep(self.delay)
        turn = self._turns[request_id]
        self._turns[request_id] += 1
        if self._texts is not None:
            text = self._texts.pop(0)
        else:
            assert self._policy is not None
            text = self._policy(request_id, turn, self.renderer.decode(prompt_ids))
        ids = [*self.renderer.encode(text), self.eos_id][: sampling.max_tokens]
        self.prompts.append(list(prompt_ids))
        self.generated.append(ids)
        self.request_ids.append(request_id)
        finish = "stop" if ids[-1] == self.eos_id else "length"
        lps = [-0.5] * len(ids) if self.logprobs else None
        return Generation(token_ids=ids, logprobs=lps, finish_reason=finish)

    async def close(self) -> None:
        pass


def oracle_policy(env_id: str, tasks: Sequence[Task], **env_kwargs: Any) -> Policy:
    """A :data:`Policy` that solves any of ``tasks`` with ``env_id``'s oracle: it finds the task whose prompt
    is in the conversation and writes the oracle's step for this turn, in the env's action format."""
    env = gym.make(env_id, **env_kwargs)
    scripts = {task.prompt: script_texts(env, oracle_script(env_id, task)) for task in tasks}
    env.close()

    def policy(request_id: str, turn: int, prompt_text: str) -> str:
        matches = [prompt for prompt in scripts if prompt in prompt_text]
        if not matches:
            raise LookupError(f"no scripted task's prompt is in the conversation of {request_id}")
        steps = scripts[max(matches, key=len)]
        return steps[min(turn, len(steps) - 1)]

    return policy


def _tool_env(env: gym.Env) -> ToolEnv:
    inner = env.unwrapped
    if not isinstance(inner, ToolEnv):
        raise TypeError(f"expected a toolgym ToolEnv, got {type(inner).__name__}")
    return inner

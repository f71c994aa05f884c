"""A verifiers (>= 0.4, ``verifiers.v1``) environment over any toolgym env.

verifiers 0.4 splits an environment into a *taskset* (config in, tasks out; each task scores a finished
trace with its ``@vf.reward`` functions), a *harness* (the program that talks to the model, every model
call going through verifiers' interception server, which records the turn on the trace) and an *env*
(``run(task, agents)``: how one task becomes one episode). Here:

- ``ToolgymTaskset``: one task per episode of the toolgym env named by ``--env.taskset.env`` (its
  ``env_kwargs``, ``n`` episodes of the ``split``, ``seed``), chosen by the verl exporter's rules; each
  task's data carries the episode key (env, kwargs, pinned task, reset seed), its prompt is the env's own
  first messages (system prompt with the action format, then the task).
- ``ToolgymEnv.run``: plays the toolgym env host-side as the conversation's user, like verifiers' own
  TextArena and OpenEnv envs: the model's reply is ``env.step(reply)`` (the env's parser and tools), the
  messages the env appends (the tool's output) are the next user turn, and the episode ends when the env
  says so (an answer the verifier judged, or the env's ``max_turns``). The verdict goes on the trace.
- ``ToolgymTask.verdict``: the rubric, a ``@vf.reward``: the env verifier's reward (0.0 for an episode that
  ended without an answer; a verifier that failed raises, so verifiers records an error, never a silent 0).
  ``ToolgymTask.toolgym`` (a ``@vf.metric``) adds passed, turns, tool calls and tool errors.
- ``ToolgymHarness``: a chat loop that runs in-process (nothing to install in a sandbox): one
  ``POST {endpoint}/chat/completions`` per model turn on the conversation so far. ``vllm_stops`` sends the
  env's stop strings with vLLM's ``include_stop_str_in_output``, so a turn ends after its first tool call.

verifiers loads all three from a top-level module by taskset id: the ``toolgym_verifiers`` package exports
them, so the id is ``toolgym-verifiers`` (``vf-eval toolgym-verifiers --env.taskset.env ...``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Literal

import httpx
import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig

from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.keys import EnvRequest, EpisodeKey, episode_rows


def _host() -> EpisodeHost:
    """This process's episode host for verifiers' episodes (envs reused across tasks)."""
    return EpisodeHost.shared("verifiers")


class ToolgymTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: which toolgym env and which of its episodes."""

    env: str = Field(..., min_length=1)
    """The toolgym env id, e.g. ``toolgym/Calculator-v0``."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """``gym.make`` kwargs: ``action_format``, ``max_turns``, the env's own options."""
    n: int = Field(32, ge=1)
    """Episodes (tasks) in the taskset."""
    split: Literal["train", "val"] = "train"
    """``val``: the env's fixed evaluation split (what ``toolgym eval`` scores); ``train``: seeded draws."""
    seed: int = 0


class ToolgymData(vf.TaskData):
    key: str
    """The episode key (``toolgym.rollout.keys.EpisodeKey`` as JSON): env, kwargs, task, reset seed."""
    stop: list[str] = Field(default_factory=list)
    """The env's stop strings (its action format's closing tags)."""


class ToolgymTask(vf.Task[ToolgymData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def verdict(self, trace: vf.Trace) -> float:
        """The toolgym verifier's reward for the episode."""
        result = trace.info.get("toolgym") or {}
        verdict = result.get("verdict")
        if verdict and verdict.get("error"):
            raise RuntimeError(f"the toolgym verifier failed: {verdict['error']}")
        return float(result.get("reward", 0.0))

    @vf.metric
    async def toolgym(self, trace: vf.Trace) -> dict[str, float]:
        """The episode's numbers (``Trajectory.stats``: passed, turns, tool calls and errors)."""
        return dict((trace.info.get("toolgym") or {}).get("stats") or {})


class ToolgymTaskset(vf.Taskset[ToolgymTask, ToolgymTasksetConfig]):
    def load(self) -> Iterator[ToolgymTask]:
        config = self.config
        request = EnvRequest(id=config.env, kwargs=config.env_kwargs)
        with _host().session(config.env, config.env_kwargs) as session:
            stop = list(session.inner.parser.stop_sequences)
        for row in episode_rows(request, config.n, split=config.split, seed=config.seed):
            key = row.key
            system, prompt = _split_prompt(row.prompt)
            data = ToolgymData(
                id=f"{key.task.id}#{key.seed}",
                name=key.task.id,
                prompt=prompt,
                system_prompt=system,
                key=key.to_json(),
                stop=stop,
            )
            yield ToolgymTask(data, config.task)


class ToolgymHarnessConfig(vf.HarnessConfig):
    vllm_stops: bool = False
    """Send the env's stop strings with ``include_stop_str_in_output`` (a vLLM server option)."""
    request_timeout: float = Field(600.0, gt=0)
    """Seconds one model call may take."""


class ToolgymHarness(vf.Harness[ToolgymHarnessConfig]):
    """A chat loop in this process: one chat-completions request per turn (see the module docstring)."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True  # each later turn is a relaunch on the conversation so far
    EXECUTES_CODE = False  # the toolgym env runs the tools, host-side
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message_to_wire(m) for m in prompt or []]
        body: dict[str, Any] = {"model": ctx.model, "messages": messages}
        stop = getattr(data, "stop", None)
        if self.config.vllm_stops and stop:
            body |= {"stop": list(stop), "include_stop_str_in_output": True}
        async with httpx.AsyncClient(timeout=self.config.request_timeout) as http:
            response = await http.post(
                f"{endpoint.rstrip('/')}/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {secret}"},
            )
        if response.status_code != 200:
            return ProgramResult(exit_code=1, stdout="", stderr=response.text)
        return ProgramResult(exit_code=0, stdout="", stderr="")


class ToolgymEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig())
    """The policy's seat (``--env.agent.*``). Its harness runs no code, so the local runtime is enough."""


class ToolgymEnv(vf.Env[ToolgymEnvConfig]):
    """One episode: the toolgym env plays the user (see the module docstring)."""

    async def run(self, task: ToolgymTask, agents: vf.Agents) -> None:
        key = EpisodeKey.from_json(task.data.key)
        host = _host()
        session = await asyncio.to_thread(host.session, key.env_id, key.env_kwargs)
        try:
            await host.call(session.start, key)
            reward, verdict = 0.0, None
            async with agents.agent.interaction(task) as interaction:
                segment = await interaction.turn()  # the task's prompt opens the exchange
                while not segment.terminated:
                    step = await host.call(session.step, segment.last_reply)
                    reward = step.reward
                    if step.done:
                        verdict = step.info["verdict"]
                        break
                    # what the env appended after the model's message: the tool's output
                    segment = await interaction.turn(step.observations)
                traj = session.trajectory
                # before the interaction closes: closing scores the trace (``ToolgymTask.verdict``)
                interaction.trace.info["toolgym"] = {
                    "reward": float(reward),
                    "verdict": verdict.model_dump(mode="json") if verdict is not None else None,
                    "stats": traj.stats() if traj is not None else {},
                    "task_id": key.task.id,
                }
        finally:
            session.close()


def _split_prompt(messages: list[dict[str, Any]]) -> tuple[str | None, str | list[dict[str, Any]]]:
    """The env's first messages as verifiers' ``system_prompt`` and ``prompt``."""
    system = None
    if messages and messages[0]["role"] == "system":
        system, messages = messages[0]["content"], messages[1:]
    if len(messages) == 1 and messages[0]["role"] == "user":
        return system, messages[0]["content"]
    return system, messages

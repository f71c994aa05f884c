"""toolgym-debug/Probe-v0: the smallest tool-use env a model with random weights learns, to prove a trainer's
wiring (observation masks, rewards, groups) by learning rather than by shape checks: TRL's adapter
(``tests/trainers/trl/test_learning.py``) and verl's (``examples/verl/learn-cpu.yaml``,
``benchmarks/bench_verl_learning.py``) both learn it.

An episode has two turns: the first always calls the ``probe`` tool (whatever it says becomes the probe's
note) and its output is the observation; the second is the final answer. The reward is 1.0 when the answer
starts with ``s`` or ``t``, else 0.0. With one generated token per turn (``max_tokens_per_turn=1``) the tiny
offline model starts near 0.1 (about a tenth of its tokens start so) and GRPO lifts it close to 1.0 within
about 20 CPU steps — but only when the loss is on the tokens the model generated and each sample gets its
own reward: the rewarded token comes after the observation, so training on the observation tokens instead
(an inverted mask), on the first turn only, or with rewards shuffled among the samples learns nothing.

The first turn is a tool call by position, not by what it says, so that a model with random weights (which
never writes tags) makes one: the env tells its parser which turn it parses. Everything else is a normal
``ToolEnv`` (the turn loop, the verifier contract, the trajectory).

It is registered with Gymnasium on import of this module, under its own namespace and not in toolgym's env
catalogue (``toolgym list``, the env check kit): it is a fixture for trainers, not a task. ``ENV_ENTRY``
(``"toolgym.testing.probe:toolgym-debug/Probe-v0"``) makes ``gym.make`` import it first.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from pydantic import BaseModel

from toolgym.core.task import ProceduralSource, Task
from toolgym.core.types import ParsedAction, ToolCall, ToolResult, Trajectory, Verdict
from toolgym.envs.base import ToolEnv
from toolgym.parsers.base import ActionParser
from toolgym.rewards.base import Verifier
from toolgym.tools.base import Tool

ENV_ID = "toolgym-debug/Probe-v0"
#: the id ``gym.make`` resolves in any process (it imports this module first)
ENV_ENTRY = f"{__name__}:{ENV_ID}"
TARGET_LETTERS = frozenset("st")
SYSTEM_PROMPT = "Probe, then answer."


def first_letter(text: str) -> str:
    """The first character of ``text`` after whitespace, lower-cased ('' for blank text)."""
    stripped = text.strip()
    return stripped[0].lower() if stripped else ""


class ProbeTool(Tool):
    name = "probe"
    description = "Probe the environment."
    primary_arg = "note"

    class Args(BaseModel):
        # no defaults, no extra="forbid": a schema verl's tool schema model keeps whole, so verl's own loop
        # renders the same prompt (benchmarks/bench_verl_native_loop.py)
        note: str

    #: seconds the next call sleeps (the env sets it per task: ``make_probe_env(tool_latency=...)``)
    latency = 0.0

    def run(self, args: Any) -> ToolResult:
        if self.latency > 0:
            time.sleep(self.latency)
        return ToolResult(name=self.name, output="probed")


class ProbeParser(ActionParser):
    """The first turn calls ``probe`` (its text is the note); any later turn is the final answer. The env
    sets ``first_turn`` before each parse."""

    name = "probe"
    observation_role = "tool"
    first_turn = True

    @property
    def stop_sequences(self) -> list[str]:
        return []

    def instructions(self) -> str:
        return "Your first turn probes; your second turn is the answer."

    def parse(self, text: str) -> ParsedAction:
        if self.first_turn and isinstance(text, str):
            # a call by position whatever the text, before the base parser reads it: blank (a random model's
            # one token is often whitespace), or all reasoning, which the base parser strips to nothing (the
            # tiny model's <think> and </think>: 2 of its 1,600 tokens made an invalid first turn, whose
            # feedback did not fit the response budget, and TRL's async test trained a one-turn episode).
            # Every episode then has the same shape, as in verl's own loop with the same format
            # (verl_native_tools)
            return self._probe(text)
        return super().parse(text)

    def _parse(self, text: str) -> ParsedAction:
        return self._probe(text) if self.first_turn else ParsedAction.final(text.strip())

    @staticmethod
    def _probe(note: str) -> ParsedAction:
        return ParsedAction.calls(ToolCall(name=ProbeTool.name, arguments={"note": note}))

    def format_call(self, call: ToolCall) -> str:
        return str(call.arguments.get("note") or "probe")

    def format_answer(self, answer: str) -> str:
        return answer


class ProbeEnv(ToolEnv):
    """A ``ToolEnv`` whose parser knows whether it reads the first turn, and whose probe takes the task's
    latency (``tool_latency``)."""

    parser: ProbeParser

    def __init__(self, *args: Any, tool_latency: Sequence[float] = (), **kwargs: Any):
        super().__init__(*args, **kwargs)
        if any(s < 0 for s in tool_latency):
            raise ValueError(f"tool_latency must hold seconds >= 0, got {list(tool_latency)}")
        self.tool_latency = tuple(float(s) for s in tool_latency)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        observation, info = super().reset(seed=seed, options=options)
        if self.tool_latency and self.task is not None:
            index = zlib.crc32(self.task.id.encode())
            probe = self.tools[ProbeTool.name]
            assert isinstance(probe, ProbeTool)
            probe.latency = self.tool_latency[index % len(self.tool_latency)]
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        self.parser.first_turn = self.trajectory is None or not self.trajectory.turns
        return super().step(action)


class ProbeVerifier(Verifier):
    """1.0 for an answer starting with ``s`` or ``t`` after a probe, else 0.0."""

    name = "probe"

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        probed = trajectory is not None and trajectory.tool_calls > 0
        target = first_letter(answer) in TARGET_LETTERS
        passed = probed and target
        return Verdict(reward=float(passed), passed=passed, details={"probed": probed, "target": target})


def _task(seed: int) -> Task:
    return Task(id=str(seed), prompt="Go.", answer="a word starting with s or t")


def make_probe_env(max_turns: int = 2, tool_latency: Sequence[float] = (), **env_kwargs: Any) -> ProbeEnv:
    """The probe env; ``tool_latency``: seconds each task's probe call takes, a task getting one of them by
    its id (e.g. mostly short with a few long ones: the long tail of real tool calls, for measuring how a
    trainer copes with slow episodes: ``benchmarks/bench_verl_async.py``)."""
    tools = [ProbeTool()]
    env_kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    return ProbeEnv(
        ProceduralSource("probe", _task),
        tools,
        ProbeVerifier(),
        ProbeParser(tools),
        max_turns=max_turns,
        tool_latency=tool_latency,
        **env_kwargs,
    )


def check_probe_curve(rewards: Sequence[float], *, learns: bool) -> None:
    """The learning checks' verdict on a run's mean reward per step: it starts where random weights do
    (about a tenth of the answers score); with toolgym's loop it ends near 1.0, with a control (the
    inverted mask) it never climbs. An ``AssertionError`` showing the curve otherwise."""
    curve = [round(r, 2) for r in rewards]
    assert sum(rewards[:2]) / 2 < 0.3, curve
    if learns:
        assert sum(rewards[-3:]) / 3 >= 0.8, curve
    else:
        assert max(rewards) < 0.4 and sum(rewards[-5:]) / 5 < 0.25, curve


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=make_probe_env)

__all__ = [
    "ENV_ENTRY",
    "ENV_ID",
    "ProbeEnv",
    "ProbeParser",
    "ProbeTool",
    "ProbeVerifier",
    "check_probe_curve",
    "make_probe_env",
]

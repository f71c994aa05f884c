"""What the tests of agent programs under the trainers share (verl's gateway agent loop, TRL's rollout
function with ``agent=``): the example ``openai``-SDK agent wrapped to record each session's final answer, a
scripted policy that writes an env oracle's steps as ``hermes`` tool calls (the format the gateway reads),
and the env's own verdict on an answer, to compare the trainer's rewards with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgym.core.types import ToolCall
from toolgym.parsers.base import make_parser
from toolgym.rollout.host import EpisodeHost
from toolgym.testing.scripted import oracle_script, wrong_script

EXAMPLE_AGENT = Path(__file__).resolve().parents[2] / "examples" / "gateway_agent.py"

RECORDER = """
import json, runpy

example = runpy.run_path({example!r})["agent"]


async def agent(task, base_url, api_key):
    answer = await example(task, base_url, api_key)
    row = {{"session": task.session_id, "task_id": task.task_id, "answer": answer}}
    with open({log!r}, "a") as log:
        log.write(json.dumps(row) + "\\n")
    return answer
"""


class RecordedAgent:
    """The example agent, unchanged, behind a wrapper that logs each session's answer (the agent runs in the
    trainer's process, verl's worker here: a file is what both sides can read). ``spec`` names it."""

    def __init__(self, directory: Path):
        self.log = directory / "answers.jsonl"
        module = directory / "recorded_agent.py"
        module.write_text(RECORDER.format(example=str(EXAMPLE_AGENT), log=str(self.log)))
        self.spec = f"{module}:agent"

    def answers(self) -> dict[str, dict]:
        """session id -> its task id and the answer the agent gave."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return {row["session"]: row for row in map(json.loads, lines)}


@pytest.fixture
def recorded_agent(tmp_path) -> RecordedAgent:
    return RecordedAgent(tmp_path)


def hermes_steps(env_id: str, task, *, solve: bool) -> list[str]:
    """The oracle's (or a wrong) solution as a model would write it for the gateway: tool calls in the
    ``hermes`` format, then the answer."""
    hermes = make_parser("hermes", [])
    script = oracle_script(env_id, task) if solve else wrong_script(env_id, task)
    return [hermes.format_call(s) if isinstance(s, ToolCall) else hermes.format_answer(s) for s in script]


@pytest.fixture
def hermes_policy():
    """``hermes_policy(env_id, tasks)``: a ``ScriptedClient`` policy that solves the task in the conversation
    in the first, third, ... session it sees on that task and answers wrongly in the others (so a GRPO group
    of two has rewards 1 and 0); ``policy.solved`` maps each session to whether it was given the answer."""

    def make(env_id: str, tasks):
        sessions: dict[str, bool] = {}
        per_task: dict[str, int] = {}

        def policy(request_id: str, turn: int, prompt_text: str) -> str:
            task = max((t for t in tasks if t.prompt in prompt_text), key=lambda t: len(t.prompt))
            if request_id not in sessions:
                per_task[task.id] = per_task.get(task.id, 0) + 1
                sessions[request_id] = per_task[task.id] % 2 == 1
            steps = hermes_steps(env_id, task, solve=sessions[request_id])
            return steps[min(turn, len(steps) - 1)]

        policy.solved = sessions  # type: ignore[attr-defined]
        return policy

    return make


@pytest.fixture(scope="session")
def env_verdict():
    """``env_verdict(env_id, task, answer)``: the env's verifier on an answer, as the env judges a final
    message (its own session, nothing shared with the trainer's)."""
    host = EpisodeHost(name="verdicts")

    def verdict(env_id: str, task, answer):
        with host.session(env_id) as session:
            session.reset(options={"task": task})
            return session.judge(answer)

    yield verdict
    host.close()

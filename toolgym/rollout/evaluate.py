"""``toolgym eval``: score a policy on an env's fixed evaluation split (pass@1, pass@k, reward, turns).

With ``k`` samples per task, pass@1 is the mean fraction of passing samples and pass@k the fraction of tasks
with at least one passing sample (the unbiased estimator with n = k).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import gymnasium as gym
from pydantic import BaseModel

from toolgym.core.types import Trajectory
from toolgym.envs.base import ToolEnv
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import LLMClient
from toolgym.rollout.collect import collect
from toolgym.rollout.episode import RolloutConfig
from toolgym.rollout.keys import EnvRequest


class TaskScore(BaseModel):
    task_id: str
    samples: int
    passed: int
    reward_mean: float
    errors: int


class EvalReport(BaseModel):
    env_id: str
    k: int
    tasks: int
    pass_at_1: float
    pass_at_k: float
    reward_mean: float
    turns_mean: float
    errors: int
    per_task: list[TaskScore]
    #: the JSONL file the episodes were appended to (``toolgym eval --trajectories``): ``toolgym view`` opens
    #: the report with its episodes
    trajectories: str | None = None


def score(env_id: str, trajectories: Sequence[Trajectory], k: int) -> EvalReport:
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_task[t.task_id].append(t)
    per_task = []
    for task_id, trajs in sorted(by_task.items()):
        passed = sum(bool(t.verdict and t.verdict.passed) for t in trajs)
        per_task.append(
            TaskScore(
                task_id=task_id,
                samples=len(trajs),
                passed=passed,
                reward_mean=sum(t.reward for t in trajs) / len(trajs),
                errors=sum(t.error is not None for t in trajs),
            )
        )
    n = len(per_task) or 1
    all_trajs = list(trajectories) or [Trajectory(task_id="-")]
    return EvalReport(
        env_id=env_id,
        k=k,
        tasks=len(per_task),
        pass_at_1=sum(s.passed / s.samples for s in per_task) / n,
        pass_at_k=sum(s.passed > 0 for s in per_task) / n,
        reward_mean=sum(t.reward for t in all_trajs) / len(all_trajs),
        turns_mean=sum(t.num_turns for t in all_trajs) / len(all_trajs),
        errors=sum(s.errors for s in per_task),
        per_task=per_task,
    )


async def evaluate(
    env: EnvRequest | str,
    client: LLMClient,
    renderer: ChatRenderer,
    config: RolloutConfig | None = None,
    *,
    k: int = 1,
    num_tasks: int | None = None,
    concurrency: int = 64,
    out: str | None = None,
    progress: bool = True,
) -> EvalReport:
    request = EnvRequest(id=env) if isinstance(env, str) else env
    probe = gym.make(request.id, **request.kwargs)
    try:
        inner = probe.unwrapped
        assert isinstance(inner, ToolEnv), request.id
        tasks = inner.tasks.eval_tasks(num_tasks)
    finally:
        probe.close()
    if not tasks:
        raise ValueError(f"{request.id} has an empty evaluation split")
    trajectories, _ = await collect(
        [request],
        client,
        renderer,
        config,
        group_size=k,
        concurrency=concurrency,
        tasks={request.id: tasks},
        out=out,
        progress=progress,
    )
    return score(request.id, trajectories, k)

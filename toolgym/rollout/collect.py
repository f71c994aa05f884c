"""The collector: many episodes at once, in GRPO groups, streamed to JSONL, with a summary.

Every episode runs ``run_episode`` as its own asyncio task, so while one episode waits for a tool the engine
keeps generating for the others (no turn barrier). ``concurrency`` bounds episodes in flight (and so env
instances and the KV cache in use); a group's samples share the task and the env seed and differ in the
sampling seed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
from pydantic import BaseModel

from toolgym.core.task import Task
from toolgym.core.types import Trajectory
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import Generation, LLMClient, Sampling
from toolgym.rollout.episode import RolloutConfig
from toolgym.rollout.group_judge import GroupVerifier, deferring, group_verifier, judge_group
from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.keys import EnvRequest, draw_task

#: one played sample: its trajectory, its env's group judge (None: judged alone) and the task it played
Played = tuple[Trajectory, GroupVerifier | None, Task | None]


class EnvSummary(BaseModel):
    episodes: int
    errors: int
    reward_mean: float
    success_rate: float
    turns_mean: float
    tool_calls_mean: float
    tool_errors: int
    stop_reasons: dict[str, int]


class Summary(BaseModel):
    envs: dict[str, EnvSummary]
    episodes: int
    wall_s: float
    generated_tokens: int
    generated_tokens_per_s: float
    #: mean seconds per env.step (tools + verifier), over all steps
    env_step_s_mean: float
    #: share of the wall time with no generation request in flight (0 = the engine was never starved)
    engine_idle_fraction: float

    def table(self) -> str:
        from toolgym.util.table import format_table

        rows = [
            [
                env_id,
                str(s.episodes),
                f"{s.reward_mean:.3f}",
                f"{s.success_rate:.2f}",
                f"{s.turns_mean:.2f}",
                f"{s.tool_calls_mean:.2f}",
                str(s.errors),
                ", ".join(f"{k}:{v}" for k, v in sorted(s.stop_reasons.items())),
            ]
            for env_id, s in sorted(self.envs.items())
        ]
        head = ["env", "episodes", "reward", "success", "turns", "tool calls", "errors", "stop reasons"]
        totals = (
            f"{self.episodes} episodes in {self.wall_s:.1f}s; {self.generated_tokens} tokens generated "
            f"({self.generated_tokens_per_s:.0f} tok/s); env.step {self.env_step_s_mean * 1000:.1f} ms mean; "
            f"engine idle {self.engine_idle_fraction:.1%}"
        )
        return format_table(head, rows) + "\n" + totals


class InFlightClient:
    """Wraps a client to measure how long no generation request was in flight."""

    def __init__(self, client: LLMClient):
        self.client = client
        self.in_flight = 0
        self.idle_s = 0.0
        self._idle_since: float | None = None

    def start(self) -> None:
        self._idle_since = time.perf_counter()
        self.idle_s = 0.0

    def stop(self) -> None:
        if self._idle_since is not None:
            self.idle_s += time.perf_counter() - self._idle_since
            self._idle_since = None

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        if self.in_flight == 0 and self._idle_since is not None:
            self.idle_s += time.perf_counter() - self._idle_since
            self._idle_since = None
        self.in_flight += 1
        try:
            return await self.client.generate(prompt_ids, sampling, request_id)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle_since = time.perf_counter()

    async def close(self) -> None:
        await self.client.close()


async def collect(
    envs: Sequence[EnvRequest | str],
    client: LLMClient,
    renderer: ChatRenderer,
    config: RolloutConfig | None = None,
    *,
    tasks_per_env: int = 8,
    group_size: int = 1,
    concurrency: int = 64,
    seed: int = 0,
    tasks: dict[str, Sequence[Task]] | None = None,
    out: str | Path | None = None,
    progress: bool = True,
) -> tuple[list[Trajectory], Summary]:
    """Roll out ``tasks_per_env`` tasks of every env, each ``group_size`` times (a GRPO group).

    Task ``i`` of an env is the one ``env.reset(seed=seed + i)`` draws, unless ``tasks`` gives an env's task
    list explicitly (evaluation splits). Sample ``j`` of a group uses sampling seed
    ``(seed + i) * 1000 + j * 100``. Trajectories are appended to ``out`` (JSONL) as they finish. An episode
    that fails (engine or env error) is recorded with ``error`` set and counted, never dropped silently.

    With ``group_size`` > 1 and an env whose verifier judges groups (``verify_group``: a
    ``GroupJudgeVerifier``), a group's samples are judged together once all of them are done, one judge call
    per group (``toolgym.rollout.group_judge``; no pointwise call first), and its trajectories are written
    then.
    """
    import toolgym  # noqa: F401 - registers envs

    config = config or RolloutConfig()
    requests = [EnvRequest(id=e) if isinstance(e, str) else e for e in envs]
    if not requests:
        raise ValueError("no envs to roll out")
    for r in requests:
        if r.id not in gym.registry:
            raise KeyError(f"unknown env {r.id!r}; `toolgym list` shows the registered envs")
    if tasks_per_env < 1 or group_size < 1 or concurrency < 1:
        raise ValueError("tasks_per_env, group_size and concurrency must be >= 1")
    tasks = tasks or {}
    groups = [
        (req, i, task)
        for req in requests
        for i, task in enumerate(tasks.get(req.id) or [None] * tasks_per_env)
    ]

    host = EpisodeHost(max_concurrent_episodes=concurrency, name="collect")
    tracked = InFlightClient(client)
    sink = Path(out).open("a", encoding="utf-8") if out else None  # noqa: SIM115 - closed in the finally below
    bar = _progress_bar(len(groups) * group_size, progress)
    results: list[Trajectory] = []
    drawn: dict[str, asyncio.Future[Task]] = {}  # one task draw per group, shared by its samples

    async def one(req: EnvRequest, task_index: int, task: Task | None, sample: int) -> Played:
        task_seed = seed + task_index
        group = f"{req.id}#{task_index}"
        judge: GroupVerifier | None = None
        try:
            async with host.slots(), host.lease(req.id, req.kwargs) as env:
                if task is None:
                    if group not in drawn:
                        drawn[group] = asyncio.ensure_future(host.call(draw_task, env, task_seed))
                    task = await drawn[group]
                judge = group_verifier(env) if group_size > 1 else None
                with deferring(env, judge is not None):  # the group judge judges it below, not the env
                    traj = await host.run(
                        env,
                        tracked,
                        renderer,
                        config,
                        seed=task_seed,
                        options={"task": task},
                        request_id=f"{group}-s{sample}",
                        sampling_seed=task_seed * 1000 + sample * 100,
                    )
        except Exception as exc:  # the env or the task draw failed: recorded and counted, not lost
            traj = Trajectory(task_id="?", stop_reason="error", error=f"{type(exc).__name__}: {exc}")
        traj = traj.model_copy(update={"env_id": req.id, "group": group, "sample": sample})
        if bar is not None:
            bar.update(1)
        if judge is None:  # judged by its env already: written as it finishes
            record(traj)
        return traj, judge, task

    def record(traj: Trajectory) -> None:
        results.append(traj)
        if sink is not None:
            sink.write(traj.model_dump_json() + "\n")
            sink.flush()

    async def group_of(req: EnvRequest, task_index: int, task: Task | None) -> None:
        """The group's samples; with a group judge, judged together once all are done (one call)."""
        played = await asyncio.gather(*(one(req, task_index, task, s) for s in range(group_size)))
        waiting = [(traj, judge, task) for traj, judge, task in played if judge is not None]
        if waiting:  # the samples whose env deferred its judge: one call for them all
            _, judge, played_task = waiting[0]
            assert judge is not None and played_task is not None
            for traj in await host.call(judge_group, judge, played_task, [t for t, _, _ in waiting]):
                record(traj)

    start = time.perf_counter()
    tracked.start()
    try:
        await asyncio.gather(*(group_of(*group) for group in groups))
    finally:
        tracked.stop()
        wall = time.perf_counter() - start
        if bar is not None:
            bar.close()
        if sink is not None:
            sink.close()
        host.close()
    return results, summarize(results, wall, tracked.idle_s)


def summarize(trajectories: Sequence[Trajectory], wall_s: float, idle_s: float = 0.0) -> Summary:
    by_env: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_env[t.env_id].append(t)
    envs = {}
    for env_id, trajs in by_env.items():
        ok = [t for t in trajs if t.error is None]
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
        stops: dict[str, int] = defaultdict(int)
        for t in trajs:
            stops[t.stop_reason or "?"] += 1
        envs[env_id] = EnvSummary(
            episodes=len(trajs),
            errors=len(trajs) - len(ok),
            reward_mean=mean([t.reward for t in ok]),
            success_rate=mean([float(bool(t.verdict and t.verdict.passed)) for t in ok]),
            turns_mean=mean([t.num_turns for t in ok]),
            tool_calls_mean=mean([t.tool_calls for t in ok]),
            tool_errors=sum(t.tool_errors for t in ok),
            stop_reasons=dict(stops),
        )
    tokens = sum(t.generated_tokens for t in trajectories)
    steps = sum(t.num_turns for t in trajectories)
    return Summary(
        envs=envs,
        episodes=len(trajectories),
        wall_s=wall_s,
        generated_tokens=tokens,
        generated_tokens_per_s=tokens / wall_s if wall_s > 0 else 0.0,
        env_step_s_mean=sum(t.env_s for t in trajectories) / steps if steps else 0.0,
        engine_idle_fraction=min(idle_s / wall_s, 1.0) if wall_s > 0 else 0.0,
    )


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="episodes", unit="ep")


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Read trajectories written by ``collect(out=...)``."""
    with Path(path).open(encoding="utf-8") as fh:
        return [Trajectory.model_validate(json.loads(line)) for line in fh if line.strip()]

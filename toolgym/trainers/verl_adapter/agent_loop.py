"""``ToolgymAgentLoop``: verl's agent loop for rows exported by toolgym (``toolgym export verl``).

verl builds one agent-loop instance per sample and calls ``run(sampling_params, **row)``. The row names its
env (``extra_info.env_id``, ``env_kwargs``) and pins its task (``extra_info.task``), so every sample of a
GRPO group plays the same task. The loop borrows an env from a per-process pool, plays the episode with the
shared runner (``toolgym.rollout.run_episode``) through verl's own vLLM servers (``VerlServerClient``), and
returns the runner's tokens as they are: the prompt, the response with mask 1 exactly on generated tokens,
their logprobs, and the verifier's reward as ``reward_score`` (so verl skips its reward loop and puts the
reward on the last response token, which the runner guarantees is a generated one).

The rules the sample follows on its way to verl (lengths, untrainable samples, the reward on the last
token, fixed keys, the bound on episodes per worker, episode dumps) are every toolgym loop's:
``loop_base.py`` states them. This loop adds that an env whose verifier judges groups (``verify_group``: an
LLM judge with ``"group": true``) is judged per GRPO group: the samples of one ``uid`` this worker plays are
gathered and judged with one call once all are done (``toolgym.rollout.group_judge.GroupGathering``); a
group split across workers is judged pointwise, and the verdict's details say so.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from toolgym.core.task import Task
from toolgym.core.types import Trajectory
from toolgym.rollout.group_judge import (
    DEFAULT_GROUP_TIMEOUT_S,
    GroupGathering,
    GroupVerifier,
    play_for_group,
)
from toolgym.trainers.verl_adapter.client import VerlServerClient
from toolgym.trainers.verl_adapter.loop_base import ToolgymLoopBase

#: the group gathering of each event loop (verl's worker runs one; it builds an agent loop per sample)
_GATHERINGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GroupGathering] = (
    weakref.WeakKeyDictionary()
)


class ToolgymAgentLoop(ToolgymLoopBase):
    """Play one exported row's toolgym env (see the module docstring).

    Args (beyond ``ToolgymLoopBase``'s, set in the agent-loop YAML):
        group_judge_timeout_s: for an env whose verifier judges groups (``verify_group``), how long a
            finished sample waits for the rest of its GRPO group (its ``uid``) in this worker before it is
            judged alone (``toolgym.rollout.group_judge``).
    """

    def __init__(self, *args: Any, group_judge_timeout_s: float = DEFAULT_GROUP_TIMEOUT_S, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.group_judge_timeout_s = float(group_judge_timeout_s)
        self.group_size = int(self.rollout_config.get("n", 1) or 1)

    def _gathering(self) -> GroupGathering:
        loop = asyncio.get_running_loop()
        if loop not in _GATHERINGS:
            _GATHERINGS[loop] = GroupGathering(self.host.call, timeout_s=self.group_judge_timeout_s)
        return _GATHERINGS[loop]

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play the row's episode. With an env whose verifier judges groups (``verify_group``) and
        ``rollout.n`` > 1, the samples of one ``uid`` are judged together, one judge call per group, once all
        of them have finished in this worker (``GroupGathering``: each sample registers before its first
        ``await``, so the worker knows how many of the group it plays)."""
        uid = str(kwargs.get("uid") or "")
        gathering = self._gathering() if self.group_size > 1 and uid else None
        if gathering is not None:
            gathering.start(uid)
        try:
            traj, judge, task, client = await self._play(sampling_params, gathering is not None, kwargs)
        except BaseException:
            if gathering is not None:
                gathering.abandon(uid)
            raise
        if gathering is not None:
            if judge is None or task is None:
                gathering.abandon(uid)  # judged by the env as usual: nothing to gather
            else:
                traj = await gathering.finish(uid, self.group_size, traj, judge, task)
        self._offer_dump(traj, client)
        return self._output(traj, client)

    async def _play(
        self, sampling_params: dict[str, Any], group: bool, kwargs: dict[str, Any]
    ) -> tuple[Trajectory, GroupVerifier | None, Task | None, VerlServerClient]:
        row = self._episode_key(kwargs)
        client = self._server_client(sampling_params, kwargs)
        traj, judge, task = await play_for_group(
            self.host,
            row,
            client,
            self.renderer,
            self._rollout_config(sampling_params),
            group=group,
            request_id=uuid4().hex,
        )
        return traj, judge, task, client


__all__ = ["ToolgymAgentLoop"]

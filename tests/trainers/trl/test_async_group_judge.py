"""TRL's asynchronous trainer with toolgym's episodes (``env=``) on an env whose judge ranks a GRPO group's
answers together (``Report-v0`` with ``judge: {group: true}``): each sample plays with the judge deferred,
and when TRL hands the loop the finished group (``_score_group``) the group is judged in one call, each
sample trained on its own verdict. The episode dump (``dump_every``) gets each episode with that verdict.

The loop's episode path runs for real (``_play_episode``: toolgym's runner, the group's three samples of one
row) against a scripted policy and the scripted judge (``reference_overlap``: 10 per criterion when the
answer has every word of the reference, else 2; an answer with no fact is refused by the gate, never sent).
The loop is built without TRL's ``__init__``, which needs a vLLM server and spawns nothing itself: the
attributes it sets that the episode path reads are set here.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace

import gymnasium as gym
import pytest
from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup

from toolgym.rollout import EnvRequest
from toolgym.rollout.dump import DumpSettings, EpisodeDump
from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.models import make_renderer
from toolgym.testing.judge_server import scripted_judge
from toolgym.testing.scripted import ScriptedClient, oracle_script, script_texts
from toolgym.trainers.trl_adapter import prompt_dataset
from toolgym.trainers.trl_adapter.async_rollout import EpisodeSettings, ToolgymRolloutLoop
from toolgym.viewer import load

ENV = "toolgym/Report-v0"
GROUP = 3


@pytest.fixture()
def judge():
    with scripted_judge(mode="reference_overlap") as server:
        yield server


def _policy(env: gym.Env):
    """The group's first sample answers with the reference, the second with one fact, the third with none
    (in the order their episodes start)."""
    samples: dict[str, int] = {}

    def policy(request_id, turn, prompt_text):
        sample = samples.setdefault(request_id, len(samples))
        env.reset(seed=0)
        task = env.unwrapped.task
        assert task.prompt in prompt_text
        *calls, reference = script_texts(env, oracle_script(ENV, task))
        if turn < len(calls):
            return calls[turn]
        parser = env.unwrapped.parser
        fact = parser.format_answer(f"{task.data['name']}: {task.data['facts'][0][0]}.")
        return [reference, fact, parser.format_answer("I do not know.")][sample]

    return policy


def _loop(request: EnvRequest, renderer, dump: DumpSettings) -> ToolgymRolloutLoop:
    loop = ToolgymRolloutLoop.__new__(ToolgymRolloutLoop)
    loop.settings = EpisodeSettings(env=[request])
    loop.episodes = True
    env = gym.make(ENV, **request.kwargs)
    loop._host = EpisodeHost(name="trl-async-test")
    loop._client = ScriptedClient(renderer, _policy(env))
    loop._renderer = renderer
    loop.max_tokens = 2048
    loop._infos, loop._awaiting = {}, {}
    loop._rates = defaultdict(lambda: [0.0, 0.0])
    loop._failed_in_a_row, loop.max_failed_in_a_row = 0, 10
    loop._push_rollout_metrics = lambda **metrics: None  # TRL's queue to the trainer
    loop._model_version_value = SimpleNamespace(value=4)  # the weights version (TRL's shared value)
    loop._dump = EpisodeDump(dump, trainer="trl")
    return loop


def test_a_group_judged_envs_samples_are_judged_together_when_trl_scores_the_group(judge, tmp_path):
    renderer = make_renderer("tiny")
    request = EnvRequest(
        id=ENV, kwargs={"judge": {"base_url": judge.url, "model": "scripted", "group": True}}
    )
    (row,) = prompt_dataset([request], 1, seed=0)
    loop = _loop(request, renderer, DumpSettings(directory=str(tmp_path / "episodes"), every=2, episodes=8))
    try:

        async def play_group() -> RolloutGroup:
            group = RolloutGroup(
                prompts=[], reward_kwargs={}, completions=[], completions_ids=[], completions_sequences=[],
                tool_call_counts=[], tool_failure_counts=[], model_version=0, group_id=0, env_rewards=[],
                rollout_rewards=[],
            )  # fmt: skip
            for _ in range(GROUP):  # one after another: the policy numbers the samples as they start
                completion, ids, sequences, calls, failures, reward = await loop._play_episode(row["prompt"])
                group.prompts.append(row["prompt"])
                group.completions.append(completion)
                group.completions_ids.append(ids)
                group.completions_sequences.append(sequences)
                group.tool_call_counts.append(calls)
                group.tool_failure_counts.append(failures)
                group.rollout_rewards.append(reward)
            return group

        group = asyncio.run(play_group())
        # played with the judge deferred: no call yet, nothing trainable, nothing counted
        assert judge.count == 0
        assert group.rollout_rewards == [None] * GROUP and group.completions_sequences == [[]] * GROUP
        assert len(loop._awaiting) == GROUP and loop._rates["toolgym/untrainable"] == [0.0, 0.0]
        assert not (tmp_path / "episodes").exists()  # nothing dumped before the verdicts

        asyncio.run(loop._judge_awaiting(group))
        # one call for the group: the two answers past the gate, numbered in one prompt
        assert judge.count == 1
        assert judge.requests[0]["messages"][-1]["content"].count('<answer_to_judge index="') == 2
        assert group.rollout_rewards == [1.0, pytest.approx(0.2), 0.0]
        assert not loop._awaiting and loop._rates["toolgym/untrainable"] == [0.0, 3.0]
        for completion, sequences in zip(group.completions, group.completions_sequences, strict=True):
            (sequence,) = sequences  # each sample trains on its episode's tokens, the sampled ones
            assert any(sequence.completion_mask) and len(sequence.old_log_probs) == len(sequence.input_ids)
            assert "toolgym/passed" in loop._infos[id(completion)]
        assert loop._infos[id(group.completions[0])]["toolgym/passed"] == 1.0
        # the dump has each episode with its group verdict, at the weights version that played it
        dumped = load(tmp_path / "episodes")
        assert [e.step for e in dumped.episodes] == [4] * GROUP and all(e.trained for e in dumped.episodes)
        assert [e.trajectory.reward for e in dumped.episodes] == [1.0, pytest.approx(0.2), 0.0]
        assert dumped.episodes[0].trajectory.verdict.details["group_size"] == 2
    finally:
        loop._host.close()

"""The group judge inside verl's reward step (CPU, no engine): toolgym's agent loop in verl's real
AgentLoopWorker, a scripted policy behind a stand-in for verl's server, and a scripted judge
(``reference_overlap``). The samples of one ``uid`` are judged together, one judge request per group, and
each sample's ``reward_score`` is the judge's."""

import asyncio
from collections import defaultdict

import gymnasium as gym
import pyarrow.parquet as pq
import pytest

from toolgym.core.task import Task
from toolgym.rollout import EnvRequest
from toolgym.rollout.models import make_renderer
from toolgym.testing.judge_server import scripted_judge
from toolgym.testing.scripted import ScriptedClient, oracle_script, script_texts
from toolgym.testing.verl import ClientServerStandIn, agent_loop_worker, dataset_batch, verl_config
from toolgym.trainers.verl_adapter.export import export_verl

ENV = "toolgym/Report-v0"
PROMPT, RESPONSE = 1024, 1024


@pytest.fixture()
def judge():
    with scripted_judge(mode="reference_overlap") as server:
        yield server


def _policy(judge_kwargs, tasks):
    """The first sample of a task to speak answers with the reference (10s), the second with one fact
    (2s), the third with none (the gate's 0, never sent)."""
    env = gym.make(ENV, judge=judge_kwargs)
    samples = defaultdict(list)

    def policy(request_id, turn, prompt_text):
        task = next(t for t in tasks if t.prompt in prompt_text)
        if request_id not in samples[task.prompt]:
            samples[task.prompt].append(request_id)
        sample = samples[task.prompt].index(request_id)
        *calls, reference = script_texts(env, oracle_script(ENV, task))
        if turn < len(calls):
            return calls[turn]
        parser = env.unwrapped.parser
        answers = [reference, parser.format_answer(f"{task.data['name']}: {task.data['facts'][0][0]}.")]
        return [*answers, parser.format_answer("I do not know.")][sample]

    return policy


def _scores(tmp_path, judge_kwargs, *, n, repeats):
    renderer = make_renderer("tiny")
    envs = [EnvRequest(id=ENV, kwargs={"judge": judge_kwargs, "max_turns": 3})]
    path = export_verl(envs, n=2, out=tmp_path)
    rows = pq.read_table(path).column("extra_info").to_pylist()
    tasks = [Task.model_validate_json(row["task"]) for row in rows]
    config = verl_config(prompt_length=PROMPT, response_length=RESPONSE, group_size=n)
    client = ScriptedClient(renderer, _policy(judge_kwargs, tasks))
    worker = agent_loop_worker(ClientServerStandIn(client), config)
    out = asyncio.run(worker.generate_sequences(dataset_batch(path, config, worker.tokenizer, repeats)))
    by_uid = defaultdict(list)
    for i in range(len(out)):
        assert not out.non_tensor_batch["toolgym_error"][i]
        by_uid[out.non_tensor_batch["uid"][i]].append(round(float(out.batch["rm_scores"][i].sum()), 6))
    return sorted(sorted(scores) for scores in by_uid.values())


def test_a_grpo_group_is_judged_in_one_request_and_rewarded_as_judged(tmp_path, judge):
    scores = _scores(tmp_path, {"base_url": judge.url, "model": "scripted", "group": True}, n=3, repeats=3)
    assert scores == [[0.0, 0.2, 1.0]] * 2
    assert judge.count == 2  # one per uid, no pointwise request first
    for request in judge.requests:
        assert request["messages"][-1]["content"].count('<answer_to_judge index="') == 2


def test_a_group_split_across_workers_is_judged_alone(tmp_path, judge):
    """``rollout.n`` is 3 but this worker plays 2 samples of each uid: each is judged pointwise."""
    scores = _scores(tmp_path, {"base_url": judge.url, "model": "scripted", "group": True}, n=3, repeats=2)
    assert scores == [[0.2, 1.0]] * 2
    assert judge.count == 4
    assert all("answer_to_judge index=" not in r["messages"][-1]["content"] for r in judge.requests)


def test_a_pointwise_judge_is_called_per_answer(tmp_path, judge):
    scores = _scores(tmp_path, {"base_url": judge.url, "model": "scripted"}, n=3, repeats=3)
    assert scores == [[0.0, 0.2, 1.0]] * 2 and judge.count == 4

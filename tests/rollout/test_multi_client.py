"""Episodes spread over several engines (``MultiClient``, ``toolgym rollout --server A --server B``): the same
trajectories and summary as one engine, every episode answered once and kept on one engine."""

import asyncio
import json

import gymnasium as gym
import pytest

from toolgym.cli import main as cli_main
from toolgym.rollout import Sampling, collect, make_client
from toolgym.rollout.clients.multi import MultiClient
from toolgym.rollout.clients.openai_http import OpenAICompletionsClient
from toolgym.rollout.episode import RolloutConfig
from toolgym.rollout.keys import draw_task
from toolgym.testing.openai_scripted import scripted_completions_app
from toolgym.testing.scripted import ScriptedClient, oracle_policy
from toolgym.testing.servers import serve_in_thread

ENV = "toolgym/Calculator-v0"
EPISODES = 6


@pytest.fixture(scope="module")
def policy():
    """The Calculator oracle for the tasks ``collect`` draws with seeds 0..EPISODES-1: a tool call, then the
    right answer, so rewards are 1.0 and every episode exercises the tool path."""
    env = gym.make(ENV)
    tasks = [draw_task(env, seed) for seed in range(EPISODES)]
    env.close()
    return oracle_policy(ENV, tasks)


def _rollout(client, renderer, out=None):
    config = RolloutConfig(max_response_tokens=256, max_tokens_per_turn=64)
    return asyncio.run(
        collect(
            [ENV], client, renderer, config, tasks_per_env=EPISODES, group_size=2, out=out, progress=False
        )
    )


def _comparable(trajectories):
    keep = ("env_id", "task_id", "group", "sample", "reward", "stop_reason", "prompt_ids", "response_ids")
    return sorted(tuple(str(t.model_dump()[k]) for k in keep) for t in trajectories)


def test_episodes_are_spread_over_engines_and_each_stays_on_one(renderer, policy):
    one = ScriptedClient(renderer, policy)
    single, single_summary = _rollout(one, renderer)
    engines = [ScriptedClient(renderer, policy, delay=0.002) for _ in range(3)]
    multi = MultiClient(engines)
    spread, summary = _rollout(multi, renderer)

    assert _comparable(spread) == _comparable(single)  # the same episodes, token for token
    assert summary.envs[ENV] == single_summary.envs[ENV] and summary.envs[ENV].reward_mean == 1.0
    sessions = [set(e.request_ids) for e in engines]
    assert all(sessions), "every engine got episodes"
    assert sum(len(s) for s in sessions) == len(spread) == 2 * EPISODES  # each episode on exactly one engine
    assert set().union(*sessions) == set(one.request_ids)
    assert multi.episodes_per_engine == [len(s) for s in sessions]
    assert max(multi.episodes_per_engine) - min(multi.episodes_per_engine) <= 1  # balanced
    # every turn was answered once, and a session's turns all by one engine (the sets above are disjoint)
    assert sum(len(e.request_ids) for e in engines) == sum(t.num_turns for t in spread) > len(spread)


def test_a_new_episode_goes_to_the_engine_with_fewest_requests_in_flight(renderer):
    slow, fast = (
        ScriptedClient(renderer, ["<answer>1</answer>"] * 9, delay=0.2),
        ScriptedClient(renderer, ["<answer>1</answer>"] * 9),
    )
    multi = MultiClient([slow, fast])

    async def main():
        sampling = Sampling(max_tokens=8)
        first = asyncio.create_task(multi.generate([1], sampling, "a"))  # slow engine, still busy
        await asyncio.sleep(0.01)
        for name in "bcd":  # the fast engine answers at once, so it stays the least loaded
            await multi.generate([1], sampling, name)
        await first
        await multi.generate([1], sampling, "a")  # a later turn follows its session
        await multi.close()

    asyncio.run(main())
    assert slow.request_ids == ["a", "a"] and fast.request_ids == ["b", "c", "d"]


def test_rollout_command_with_several_servers_writes_what_one_server_writes(
    renderer, policy, tmp_path, capsys
):
    servers = [ScriptedClient(renderer, policy) for _ in range(3)]
    args = ["rollout", "--env", ENV, "--model", "tiny", "--episodes", str(EPISODES), "--no-progress"]
    with (
        serve_in_thread(scripted_completions_app(servers[0])) as a,
        serve_in_thread(scripted_completions_app(servers[1])) as b,
        serve_in_thread(scripted_completions_app(servers[2])) as c,
    ):
        assert cli_main([*args, "--server", a, "--out", str(tmp_path / "one.jsonl")]) == 0
        one_out = capsys.readouterr().out
        assert cli_main([*args, "--server", b, "--server", c, "--out", str(tmp_path / "two.jsonl")]) == 0
        two_out = capsys.readouterr().out

    one = [json.loads(line) for line in (tmp_path / "one.jsonl").read_text().splitlines()]
    two = [json.loads(line) for line in (tmp_path / "two.jsonl").read_text().splitlines()]
    assert len(one) == len(two) == EPISODES
    assert [sorted(row) for row in two] == [sorted(row) for row in one]  # the same JSONL schema
    by_group = lambda rows: sorted((r["group"], r["reward"], r["response_ids"]) for r in rows)  # noqa: E731
    assert by_group(two) == by_group(one) and all(r["reward"] == 1.0 for r in two)
    assert servers[1].request_ids and servers[2].request_ids  # both servers answered
    assert set(servers[1].request_ids).isdisjoint(servers[2].request_ids)
    # the same summary table: header and the env's row (timings aside)
    table = lambda out: [line for line in out.splitlines() if ENV in line or line.startswith("env")]  # noqa: E731
    assert table(two_out) == table(one_out)


def test_make_client_routes_several_urls_and_refuses_contradictions():
    client = make_client("tiny", server=["http://127.0.0.1:1", "http://127.0.0.1:2"])
    assert isinstance(client, MultiClient) and len(client.clients) == 2
    assert all(isinstance(c, OpenAICompletionsClient) for c in client.clients)
    asyncio.run(client.close())
    assert isinstance(make_client("tiny", server=["http://127.0.0.1:1"]), OpenAICompletionsClient)
    with pytest.raises(ValueError, match="--ray or --server"):
        make_client("tiny", server="http://127.0.0.1:1", ray_actors=2)
    with pytest.raises(ValueError, match="needs --backend vllm"):
        make_client("tiny", backend="hf", ray_actors=2)
    with pytest.raises(ValueError, match="at least one client"):
        MultiClient([])

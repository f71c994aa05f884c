"""The episode host every adapter and server runs on: token-level ``play``, text-level sessions, the trainer
sample rules, the sampling mapping, and the episode keys rows carry."""

import asyncio
import json
import threading
from types import SimpleNamespace

import gymnasium as gym
import pytest

from toolgym.core.task import Task
from toolgym.core.types import ParsedAction, ToolCall, ToolResult, Trajectory, Turn, Verdict
from toolgym.rollout import RolloutConfig
from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.keys import EnvRequest, EpisodeKey, check_env_ids, draw_task, episode_rows
from toolgym.rollout.samples import filler_token_id, sampling_from, trainer_sample
from toolgym.rollout.session import SessionClosed, SessionStateError
from toolgym.sandbox.shared import shared_slots
from toolgym.testing.scripted import ScriptedClient, oracle_policy, oracle_script, script_texts

CALC = "toolgym/Calculator-v0"


def _key(seed: int = 3, **kwargs) -> EpisodeKey:
    env = gym.make(CALC, **kwargs)
    try:
        return EpisodeKey(env_id=CALC, env_kwargs=kwargs, task=draw_task(env, seed), seed=seed)
    finally:
        env.close()


# -- token level -------------------------------------------------------------------------------------------


def test_play_runs_the_keyed_episode_and_bounds_the_episodes_in_flight(renderer):
    keys = [_key(seed) for seed in range(6)]
    client = ScriptedClient(renderer, oracle_policy(CALC, [k.task for k in keys]), delay=0.01)
    host = EpisodeHost(max_concurrent_episodes=2, name="test")
    peak, live = 0, 0
    original = host.run

    async def counted(*args, **kwargs):
        nonlocal peak, live
        live += 1
        peak = max(peak, live)
        try:
            return await original(*args, **kwargs)
        finally:
            live -= 1

    host.run = counted  # type: ignore[method-assign]

    async def main():
        return await asyncio.gather(*(host.play(k, client, renderer, RolloutConfig()) for k in keys))

    try:
        trajs = asyncio.run(main())
    finally:
        host.close()
    assert [t.task_id for t in trajs] == [k.task.id for k in keys]
    assert all(t.reward == 1.0 and t.env_id == CALC for t in trajs)
    assert peak == 2  # never more than max_concurrent_episodes at once, and they did overlap
    assert len(host.pool) == 0  # closed


def test_each_event_loop_gets_its_own_slots_even_when_a_loop_id_is_reused():
    host = EpisodeHost(max_concurrent_episodes=1)

    async def grab():
        async with host.slots():
            return host.slots()

    first, second = asyncio.run(grab()), asyncio.run(grab())  # a new loop each: no "bound to another loop"
    assert first is not second
    host.close()


def test_renderers_are_made_once_per_tokenizer_and_settings(renderer):
    host = EpisodeHost()
    tokenizer = renderer.tokenizer
    a = host.renderer(tokenizer, eos_ids=[7])
    assert host.renderer(tokenizer, eos_ids=[7]) is a and 7 in a.eos_ids
    assert host.renderer(tokenizer, chat_template_kwargs={"enable_thinking": False}, eos_ids=[]) is not a
    assert host.renderer(tokenizer, template_tools=True, eos_ids=[]) is not a
    host.close()


def test_a_shared_host_is_one_per_name_and_settings():
    a = EpisodeHost.shared("test-shared", max_concurrent_episodes=3)
    assert EpisodeHost.shared("test-shared", max_concurrent_episodes=3) is a
    assert EpisodeHost.shared("test-shared", max_concurrent_episodes=4) is not a
    assert EpisodeHost.shared("test-other", max_concurrent_episodes=3) is not a


def test_a_host_rejects_a_zero_bound():
    with pytest.raises(ValueError, match="max_concurrent_episodes must be >= 1"):
        EpisodeHost(max_concurrent_episodes=0)


def test_a_factory_host_makes_every_env_with_the_factory_and_reserves_a_slot_per_lease(renderer):
    made = []

    def factory():
        made.append(gym.make(CALC))
        return made[-1]

    host = EpisodeHost(factory=factory)
    key = _key()
    client = ScriptedClient(renderer, oracle_policy(CALC, [key.task]))
    traj = asyncio.run(host.play(key, client, renderer, RolloutConfig()))
    assert traj.reward == 1.0 and len(made) == 1
    slots = shared_slots()
    before = slots._reserved
    with host.pool.lease(CALC, {}):  # the factory's env again, holding a sandbox session slot
        assert slots._reserved == before + 1 and len(made) == 1
    assert slots._reserved == before
    host.close()


# -- text level --------------------------------------------------------------------------------------------


def test_a_session_hands_back_what_each_step_added_and_ends_on_the_answer():
    key = _key()
    host = EpisodeHost()
    with host.session(CALC) as session:
        _, info = session.start(key)
        assert info["task_id"] == key.task.id
        texts = script_texts(session.env, oracle_script(CALC, key.task))
        steps = [session.step(text) for text in texts]
        assert steps[-1].done and steps[-1].reward == 1.0 and steps[-1].observations == []
        first = steps[0]
        assert first.added[0] == {"role": "assistant", "content": texts[0]}
        assert first.observations == first.added[1:] and first.observations  # the tool's output
        chat = info["messages"] + [m for s in steps for m in s.added]
        assert chat == steps[-1].info["messages"]  # nothing handed out twice, nothing lost
        with pytest.raises(SessionStateError, match="episode is over"):
            session.step("more")
    with pytest.raises(SessionClosed):
        session.step("after close")
    host.close()


def test_a_session_refuses_a_step_before_reset_and_a_key_of_another_env():
    host = EpisodeHost()
    with host.session(CALC) as session:
        with pytest.raises(SessionStateError, match="reset before step"):
            session.step("x")
        other = EpisodeKey(env_id="toolgym/Math-v0", task=Task(id="t", prompt="1+1"))
        with pytest.raises(ValueError, match="this session plays 'toolgym/Calculator-v0'"):
            session.start(other)
    host.close()


def test_session_tool_calls_join_the_trajectory_and_are_bounded_by_max_turns():
    host = EpisodeHost()
    with host.session(CALC, {"max_turns": 3}) as session:
        with pytest.raises(SessionStateError, match="reset before calling"):
            session.call_tool("calculator", {"expression": "1+1"})
        session.start(_key(max_turns=3))
        assert "2" in session.call_tool("calculator", {"expression": "1+1"})
        session.call_tool("calculator", {"expression": "2+2"})
        assert "tool calls are used up" in session.call_tool("calculator", {"expression": "3+3"})
        traj = session.trajectory
        assert traj is not None and traj.tool_calls == 3 and len(traj.turns) == 3
        assert traj.turns[0].parsed.tool_calls == (
            ToolCall(name="calculator", arguments={"expression": "1+1"}),
        )
    host.close()


def test_session_judging_reads_the_answer_as_the_parser_does_and_never_hides_a_verifier_failure():
    key = _key()
    host = EpisodeHost()
    with host.session(CALC) as session:
        session.start(key)
        right = session.judge(f"thinking... <answer>{key.task.answer}</answer>")
        assert right.passed and session.trajectory.reward == 1.0 and session.done
        session.start(key)
        assert session.judge(None).reward == 0.0 and session.trajectory.stop_reason == "max_turns"
        session.start(key)
        session.inner.verifier.verify = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("judge down"))
        failed = session.judge("42")
        assert failed.error and "judge down" in failed.error
    host.close()


def test_closing_a_session_from_another_thread_gives_the_env_back_once():
    host = EpisodeHost()
    session = host.session(CALC)
    threads = [threading.Thread(target=session.close) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(host.pool) == 1  # back in the pool, idle, not released twice
    again = host.session(CALC)
    assert again.env is not None
    host.close()


def test_a_session_of_an_env_that_is_not_a_toolgym_env_is_refused():
    gym.register("test-host/Plain-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    host = EpisodeHost()
    with pytest.raises(TypeError, match="not a toolgym env"):
        host.session("test-host/Plain-v0")
    host.close()


# -- what trainers get -------------------------------------------------------------------------------------


def _infra_turn() -> Turn:
    result = ToolResult(name="python", status="infra_error", output="the sandbox lost the session")
    return Turn(action="...", parsed=ParsedAction.calls(ToolCall(name="python")), tool_results=(result,))


def _traj(**update) -> Trajectory:
    base = Trajectory(
        task_id="t",
        prompt_ids=[1, 2, 3, 4],
        response_ids=[5, 6, 7],
        response_mask=[1, 0, 1],
        logprobs=[-0.1, 0.0, -0.2],
        reward=1.0,
        verdict=Verdict(reward=1.0, passed=True),
    )
    return base.model_copy(update=update)


def test_a_trainable_sample_keeps_the_runners_tokens_and_reward():
    sample = trainer_sample(_traj(), filler_id=0, exclude_infra_errors=True)
    assert (sample.prompt_ids, sample.response_ids, sample.mask) == ([1, 2, 3, 4], [5, 6, 7], [1, 0, 1])
    assert sample.logprobs == [-0.1, 0.0, -0.2] and sample.reward == 1.0 and sample.trainable


@pytest.mark.parametrize(
    ("update", "exclude"),
    [
        ({"error": "ClientError: down"}, False),
        ({"verdict": Verdict(reward=0.0, passed=False, error="judge down")}, False),
        ({"turns": [_infra_turn()]}, True),
    ],
)
def test_an_untrainable_sample_keeps_its_tokens_with_a_zero_mask_and_no_reward(update, exclude):
    sample = trainer_sample(_traj(**update), filler_id=0, exclude_infra_errors=exclude)
    assert sample.response_ids == [5, 6, 7] and sample.mask == [0, 0, 0]
    assert sample.reward is None and not sample.trainable


def test_infra_errors_train_when_not_excluded():
    sample = trainer_sample(_traj(turns=[_infra_turn()]), filler_id=0, exclude_infra_errors=False)
    assert sample.reward == 1.0 and sample.mask == [1, 0, 1]


def test_empty_tokens_become_a_masked_filler_and_only_an_overlong_prompt_is_cut():
    empty = trainer_sample(
        _traj(prompt_ids=[], response_ids=[], response_mask=[], logprobs=None, error="reset failed"),
        filler_id=9,
        exclude_infra_errors=True,
    )
    assert (empty.prompt_ids, empty.response_ids, empty.mask, empty.logprobs) == ([9], [9], [0], None)
    cut = trainer_sample(_traj(), filler_id=0, exclude_infra_errors=True, max_prompt_tokens=2)
    assert cut.prompt_ids == [3, 4]
    assert trainer_sample(
        _traj(), filler_id=0, exclude_infra_errors=True, max_prompt_tokens=4
    ).prompt_ids == [
        1,
        2,
        3,
        4,
    ]


def test_the_filler_is_the_pad_token_else_eos():
    assert filler_token_id(SimpleNamespace(pad_token_id=3, eos_token_id=2)) == 3
    assert filler_token_id(SimpleNamespace(pad_token_id=None, eos_token_id=2)) == 2


def test_sampling_reads_a_mapping_or_attributes_the_same_way():
    as_dict = sampling_from({"temperature": 0.7, "top_p": 0.9, "top_k": 0, "min_p": 0.05, "logprobs": 1})
    as_object = sampling_from(SimpleNamespace(temperature=0.7, top_p=0.9, top_k=0, min_p=0.05))
    assert as_dict == as_object
    assert (as_dict.temperature, as_dict.top_p, as_dict.top_k) == (0.7, 0.9, -1)
    assert as_dict.extra == {"min_p": 0.05}
    assert sampling_from({"top_k": 20, "repetition_penalty": None}).top_k == 20
    defaults = sampling_from({})
    assert (defaults.temperature, defaults.top_p, defaults.top_k, defaults.extra) == (1.0, 1.0, -1, {})
    assert sampling_from({"temperature": 0.0}).temperature == 0.0  # greedy is not "unset"


# -- episode keys ------------------------------------------------------------------------------------------


def test_a_key_round_trips_through_json_a_mapping_and_flat_fields():
    key = _key(max_turns=4)
    assert EpisodeKey.parse(key.to_json(), how="h") == key
    assert EpisodeKey.parse(json.loads(key.to_json()), how="h") == key
    fields = key.fields()
    assert all(isinstance(v, str | int) for v in fields.values())
    assert EpisodeKey.from_fields(fields, how="h") == key


def test_a_row_without_a_key_says_how_to_write_one():
    with pytest.raises(ValueError, match=r"not a toolgym episode key.*use the exporter"):
        EpisodeKey.parse("{not json", how="use the exporter")
    with pytest.raises(ValueError, match="no env_id/task fields: use the exporter"):
        EpisodeKey.from_fields({"index": 3}, how="use the exporter")


def test_rows_replay_the_prompt_they_show():
    rows = episode_rows(EnvRequest(id=CALC, kwargs={"max_turns": 3}), 4, seed=7)
    env = gym.make(CALC, max_turns=3)
    for row in rows:
        _, info = env.reset(seed=row.key.seed, options={"task": row.key.task})
        assert row.prompt == [{"role": m["role"], "content": m["content"]} for m in info["messages"]]
        assert row.key.env_kwargs == {"max_turns": 3}
    env.close()
    assert episode_rows(CALC, 4, seed=7) == episode_rows(CALC, 4, seed=7)  # deterministic


def test_a_factory_names_its_rows_by_the_env_it_makes():
    rows = episode_rows(lambda: gym.make(CALC), 2, seed=1)
    assert [r.key.env_id for r in rows] == [CALC, CALC]


def test_an_unknown_env_id_names_the_entry_and_the_closest_id():
    check_env_ids([CALC])
    with pytest.raises(ValueError, match=r"envs.1.id: unknown env 'toolgym/Calculatr-v0'; did you mean"):
        check_env_ids([CALC, "toolgym/Calculatr-v0"])
    with pytest.raises(ValueError, match=r"env.0.id: cannot import 'no_such_module'"):
        check_env_ids(["no_such_module:x/Y-v0"], where="env")

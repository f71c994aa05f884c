"""The SkyRL-Gym adapter with the real ``skyrl_gym`` package: every toolgym env registered under its own id,
episodes driven the way SkyRL's generator drives them (``make`` with ``env_config`` and the row's
``extras``, ``init``, ``step`` until ``done``), with the env's oracle (reward 1.0) and a wrong answer (0.0),
and the observations exactly what the toolgym env itself returns."""

import asyncio

import gymnasium as gym
import pyarrow.parquet as pq
import pytest
import skyrl_gym

import toolgym
from toolgym.rollout import RolloutConfig, check_prefix_property, run_episode
from toolgym.rollout.keys import EpisodeKey
from toolgym.testing.scripted import ScriptedClient, oracle_policy, oracle_script, script_texts, wrong_script
from toolgym.trainers.skyrl_adapter import ToolgymTextEnv, export_skyrl, register_all, skyrl_rows

ENV = "toolgym/Calculator-v0"


def _extras(row):
    """What SkyRL's dataset and generator hand the env: every column but prompt and env_class, plus the
    generator's max_turns."""
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    return {**extras, "max_turns": 1}


def _play(row, texts):
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=_extras(row))
    messages, meta = env.init(row["prompt"])
    outputs = []
    for text in texts:
        out = env.step(text)
        outputs.append(out)
        if out["done"]:
            break
    metrics = env.get_metrics()
    env.close()
    return env, messages, meta, outputs, metrics


def _row(rows, action_format):
    """The first row whose env plays ``action_format`` (None: the default, xml)."""
    return next(
        r for r in rows if EpisodeKey.from_json(r["toolgym"]).env_kwargs.get("action_format") == action_format
    )


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    register_all()
    path = export_skyrl(
        [{"id": ENV}, {"id": ENV, "kwargs": {"action_format": "hermes"}}],
        n=4,
        out=tmp_path_factory.mktemp("d"),
    )
    return pq.read_table(path).to_pylist()  # what SkyRL's PromptDataset reads back


def test_register_all_registers_every_toolgym_env_under_its_own_id():
    ids = register_all()
    assert set(ids) == set(toolgym.ENVS) and ENV in ids
    for env_id in ids:
        spec = skyrl_gym.spec(env_id)
        assert spec.kwargs == {"env_id": env_id}
        spec.to_json()  # a string entry point: SkyRL can serialise the spec
    assert register_all() == ids  # idempotent


def test_the_oracle_reaches_reward_1_with_the_env_own_observations(rows):
    for row in rows:
        key = EpisodeKey.from_json(row["toolgym"])
        direct = gym.make(key.env_id, **key.env_kwargs)
        _, info = direct.reset(seed=key.seed, options={"task": key.task})
        texts = script_texts(direct, oracle_script(key.env_id, key.task))
        env, messages, meta, outputs, metrics = _play(row, texts)
        assert isinstance(env, ToolgymTextEnv) and env.max_turns == direct.unwrapped.max_turns
        assert messages == info["messages"] == row["prompt"]
        assert meta["task_id"] == key.task.id
        for text, out in zip(texts, outputs):
            obs, reward, terminated, truncated, step_info = direct.step(text)
            assert out["reward"] == reward and out["done"] == (terminated or truncated)
            if not out["done"]:  # the tool's output, in the role the format uses, verbatim
                before = len(step_info["messages"]) - len(out["observations"])
                assert out["observations"] == step_info["messages"][before:]
                assert [m["content"] for m in out["observations"]] == [obs]  # one call per oracle turn
                assert out["metadata"]["tool_results"][0]["status"] == "ok"
        last = outputs[-1]
        assert last["done"] and last["reward"] == 1.0 and last["observations"] == []
        assert last["metadata"]["verdict"]["passed"] is True
        assert metrics["passed"] == 1.0 and metrics["tool_calls"] == len(texts) - 1
        direct.close()
    assert {EpisodeKey.from_json(r["toolgym"]).env_kwargs.get("action_format") for r in rows} == {
        None,
        "hermes",
    }


def test_a_wrong_answer_scores_0(rows):
    row = rows[0]
    key = EpisodeKey.from_json(row["toolgym"])
    direct = gym.make(key.env_id, **key.env_kwargs)
    texts = script_texts(direct, wrong_script(key.env_id, key.task))
    *_, outputs, metrics = _play(row, texts)
    assert outputs[-1]["done"] and outputs[-1]["reward"] == 0.0
    assert outputs[-1]["metadata"]["verdict"]["passed"] is False and metrics["passed"] == 0.0


def test_the_env_max_turns_ends_the_episode_not_skyrl_max_turns(rows):
    row = _row(rows, None)
    env = skyrl_gym.make(row["env_class"], env_config={"max_turns": 2}, extras=_extras(row))
    env.init(row["prompt"])
    first = env.step("<calculator>1+1</calculator>")
    second = env.step("<calculator>2+2</calculator>")
    env.close()
    # env_config's max_turns=2 reached the env (extras' max_turns=1, SkyRL's generator setting, did not)
    assert not first["done"] and second["done"] and second["reward"] == 0.0


def test_rows_without_an_episode_key_or_of_another_env_fail_clearly(rows):
    register_all()
    with pytest.raises(ValueError, match="export_skyrl"):
        skyrl_gym.make(ENV, env_config={}, extras={"reward_spec": {"ground_truth": "4"}})
    with pytest.raises(ValueError, match="env_class"):
        skyrl_gym.make("toolgym/Math-v0", env_config={}, extras=_extras(rows[0]))


def test_rows_pin_the_same_episodes_as_the_other_exports():
    rows = skyrl_rows(ENV, 3, seed=5)
    keys = [EpisodeKey.from_json(r["toolgym"]) for r in rows]
    assert [r["env_class"] for r in rows] == [ENV] * 3 == [r["data_source"] for r in rows]
    assert [k.seed for k in keys] == [5, 6, 7] and len({k.task.id for k in keys}) == 3


def test_skyrl_token_in_token_out_equals_toolgym_runner_tokens(rows, renderer):
    """SkyRL's token-in/token-out multi-turn path appends the chat template's rendering of each step's
    observations to the generated ids. Through this adapter the conversation is exactly the one toolgym's
    runner plays, and the tiny model's template keeps it as a prefix turn by turn, so those tokens are the
    runner's tokens."""
    row = _row(rows, "hermes")  # observations in the tool role
    key = EpisodeKey.from_json(row["toolgym"])
    direct = gym.make(key.env_id, **key.env_kwargs)
    texts = script_texts(direct, oracle_script(key.env_id, key.task))
    _, messages, _, outputs, _ = _play(row, texts)
    conversation = list(messages)
    for text, out in zip(texts, outputs):
        conversation += [{"role": "assistant", "content": text}, *out["observations"]]
    assert any(m["role"] == "tool" for m in conversation)
    assert check_prefix_property(renderer, conversation=conversation) == []

    client = ScriptedClient(renderer, oracle_policy(key.env_id, [key.task], **key.env_kwargs))
    traj = asyncio.run(run_episode(direct, client, renderer, RolloutConfig(), options={"task": key.task}))
    assert traj.reward == 1.0 and [dict(m) for m in traj.messages] == conversation
    runner_ids = traj.prompt_ids + traj.response_ids
    template_ids = renderer.encode(renderer.render(conversation))
    # the runner's sequence ends on the model's end-of-turn token; the template adds only the turn's close
    assert template_ids[: len(runner_ids)] == runner_ids
    assert template_ids[len(runner_ids) :] == renderer.turn_close_ids(client.generated[-1])
    direct.close()

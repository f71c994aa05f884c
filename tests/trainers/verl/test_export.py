"""``toolgym export verl``: Parquet verl's RLHFDataset loads as is, with the env's real prompt and the pinned
task, for one env or a mix."""

import json
from collections import Counter

import gymnasium as gym
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from verl.utils.dataset.rl_dataset import RLHFDataset

from toolgym.cli import main
from toolgym.core.task import Task
from toolgym.rollout import EnvRequest, draw_task
from toolgym.rollout.keys import EpisodeKey, episode_rows
from toolgym.rollout.models import make_renderer
from toolgym.trainers.verl_adapter.export import build_rows, export_verl, prompt_token_lengths


def _extra(rows):
    return [r["extra_info"] for r in rows]


def test_rows_pin_the_env_and_task_and_carry_the_real_prompt(tmp_path):
    envs = [EnvRequest(id="toolgym/Calculator-v0", kwargs={"max_turns": 5, "level": 2})]
    path = export_verl(envs, n=3, out=tmp_path, seed=10)
    assert path == tmp_path / "train.parquet"
    rows = pq.read_table(path).to_pylist()
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 2]
    for i, row in enumerate(rows):
        extra = row["extra_info"]
        assert row["data_source"] == extra["env_id"] == "toolgym/Calculator-v0"
        assert row["agent_name"] == "toolgym" and row["ability"] == "tool-use"
        assert json.loads(extra["env_kwargs"]) == {"max_turns": 5, "level": 2}
        task = Task.model_validate_json(extra["task"])
        # the task is the one `toolgym rollout --seed 10` plays as task i, and its answer is the ground truth
        env = gym.make("toolgym/Calculator-v0", max_turns=5, level=2)
        assert task == draw_task(env, 10 + i) and extra["seed"] == 10 + i and extra["task_id"] == task.id
        assert row["reward_model"] == {"style": "rule", "ground_truth": str(task.answer)}
        _, info = env.reset(options={"task": task})
        assert row["prompt"] == [{"role": m["role"], "content": m["content"]} for m in info["messages"]]


def test_verls_dataset_loads_the_file_as_is_and_measures_the_real_prompt(tmp_path, renderer):
    path = export_verl(["toolgym/Calculator-v0", "toolgym/Search-v0"], n=4, out=tmp_path)
    longest = max(
        len(renderer.prompt_ids(r["prompt"])) for r in pq.read_table(path, columns=["prompt"]).to_pylist()
    )
    config = OmegaConf.create(
        {"max_prompt_length": longest, "filter_overlong_prompts": True, "return_raw_chat": True}
    )
    kept = RLHFDataset(data_files=[str(path)], tokenizer=renderer.tokenizer, processor=None, config=config)
    assert len(kept) == 4
    item = kept[0]
    assert item["raw_prompt"][0]["role"] == "system" and item["agent_name"] == "toolgym"
    assert item["index"] == item["extra_info"]["index"]
    config.max_prompt_length = longest - 1  # verl's own filter drops exactly the rows too long for it
    assert len(RLHFDataset([str(path)], renderer.tokenizer, config, processor=None)) < 4


def test_prompt_lengths_count_the_tool_schemas_when_the_template_renders_them(tmp_path, renderer):
    """``template_tools: true`` puts each env's tool schemas into the prompt: the pre-flight length check
    (``toolgym train``'s, against ``max_prompt_length``) must count them, per env of a mix."""
    path = export_verl(["toolgym/Calculator-v0", "toolgym/Search-v0"], n=4, out=tmp_path)
    rows = pq.read_table(path).to_pylist()
    plain = prompt_token_lengths(path, "tiny")
    with_tools = prompt_token_lengths(path, "tiny", template_tools=True)
    tools_renderer = make_renderer("tiny", template_tools=True)
    for row, n_plain, n_tools in zip(rows, plain, with_tools, strict=True):
        schemas = gym.make(row["data_source"]).unwrapped.tool_schemas
        assert n_plain == len(renderer.prompt_ids(row["prompt"]))
        assert n_tools == len(tools_renderer.prompt_ids(row["prompt"], schemas)) > n_plain
    # the two envs' tools differ, and so does what they add
    added = {row["data_source"]: t - p for row, p, t in zip(rows, plain, with_tools, strict=True)}
    assert len(set(added.values())) == 2


def test_a_mix_is_shared_by_weight_and_shuffled():
    envs = [
        EnvRequest(id="toolgym/Calculator-v0", weight=3),
        EnvRequest(id="toolgym/Math-v0", weight=1),
    ]
    rows = build_rows(envs, n=8, seed=1)
    assert Counter(r["data_source"] for r in rows) == {"toolgym/Calculator-v0": 6, "toolgym/Math-v0": 2}
    assert [r["data_source"] for r in rows] != sorted(r["data_source"] for r in rows)  # interleaved
    assert sorted(e["index"] for e in _extra(rows)) == list(range(8))
    assert build_rows(envs, n=8, seed=1) == rows  # deterministic
    equal = [EnvRequest(id="toolgym/Calculator-v0"), EnvRequest(id="toolgym/Math-v0")]
    assert sorted(Counter(r["data_source"] for r in build_rows(equal, n=3)).values()) == [1, 2]


@pytest.mark.parametrize("split", ["train", "val"])
def test_a_mix_of_envs_with_and_without_an_agent_program_routes_each_row(split, tmp_path, renderer):
    """``agents`` (``toolgym train``: an env entry's ``agent:``): the rows are the ones ``episode_rows``
    chooses for the mix, in its order, and each names the loop and agent of the entry it came from, even when
    two entries are one env (their rows are equal but for that); verl's dataset loads the file as is."""
    agent = "examples.gateway_agent:agent"
    envs = [
        EnvRequest(id="toolgym/Calculator-v0", weight=3),
        EnvRequest(id="toolgym/Calculator-v0"),
        EnvRequest(id="toolgym/Math-v0"),
    ]
    rows = build_rows(envs, n=10, split=split, seed=4, agents=[None, agent, agent])
    keys = [EpisodeKey.from_fields(e, how="") for e in _extra(rows)]
    assert keys == [row.key for row in episode_rows(envs, 10, split=split, seed=4)]
    played = Counter((r["data_source"], r["agent_name"], r["extra_info"]["agent"]) for r in rows)
    assert played == {
        ("toolgym/Calculator-v0", "toolgym", None): 6,
        ("toolgym/Calculator-v0", "toolgym_agent", agent): 2,
        ("toolgym/Math-v0", "toolgym_agent", agent): 2,
    }
    # without agents, or with none named, the rows are as they always were (no agent field)
    assert build_rows(envs, n=10, split=split, seed=4, agents=[None] * 3) == build_rows(
        envs, n=10, split=split, seed=4
    )
    with pytest.raises(ValueError, match="one per env"):
        build_rows(envs, n=10, agents=[agent])

    path = export_verl(envs, n=10, split=split, out=tmp_path, seed=4, agents=[None, agent, agent])
    config = OmegaConf.create({"max_prompt_length": 4096, "return_raw_chat": True})
    dataset = RLHFDataset([str(path)], renderer.tokenizer, config, processor=None)
    loaded = [dataset[i] for i in range(len(dataset))]
    assert [(item["agent_name"], item["extra_info"]["agent"]) for item in loaded] == [
        (r["agent_name"], r["extra_info"]["agent"]) for r in rows
    ]


def test_prompt_lengths_count_the_tools_of_the_rows_an_agent_program_plays(tmp_path, renderer):
    """An agent's tools travel as OpenAI functions, rendered by the chat template: its rows' prompt lengths
    count them whatever ``template_tools`` says (it is the runner's setting)."""
    envs = ["toolgym/Calculator-v0", "toolgym/Calculator-v0"]
    path = export_verl(envs, n=4, out=tmp_path, agents=[None, "examples.gateway_agent:agent"])
    rows = pq.read_table(path).to_pylist()
    schemas = gym.make("toolgym/Calculator-v0").unwrapped.tool_schemas
    tools_renderer = make_renderer("tiny", template_tools=True)
    for row, n in zip(rows, prompt_token_lengths(path, "tiny"), strict=True):
        tools = schemas if row["agent_name"] == "toolgym_agent" else None
        assert n == len(tools_renderer.prompt_ids(row["prompt"], tools))
        assert (n > len(renderer.prompt_ids(row["prompt"]))) == (tools is not None)


def test_val_is_the_envs_evaluation_split():
    env = gym.make("toolgym/Math-v0")
    rows = build_rows(["toolgym/Math-v0"], n=5, split="val")
    assert [Task.model_validate_json(e["task"]) for e in _extra(rows)] == env.unwrapped.tasks.eval_tasks(5)
    assert {e["split"] for e in _extra(rows)} == {"val"}
    train_ids = {e["task_id"] for e in _extra(build_rows(["toolgym/Math-v0"], n=50))}
    assert not train_ids & {e["task_id"] for e in _extra(rows)}


def test_a_fixed_task_list_is_exported_once_each_before_repeating():
    rows = build_rows(["toolgym/PythonCode-v0"], n=164)
    assert len({e["task_id"] for e in _extra(rows)}) == 164  # every HumanEval problem once
    more = build_rows(["toolgym/PythonCode-v0"], n=170)
    assert Counter(Counter(e["task_id"] for e in _extra(more)).values()) == {1: 158, 2: 6}
    with pytest.raises(ValueError, match="fewer than the 200 rows"):
        build_rows(["toolgym/PythonCode-v0"], n=200, split="val")


def test_bad_requests_say_what_to_change():
    with pytest.raises(ValueError, match="at least one row per env"):
        build_rows(["toolgym/Calculator-v0", "toolgym/Math-v0"], n=1)
    with pytest.raises(ValueError, match="no envs"):
        build_rows([], n=1)
    with pytest.raises(gym.error.Error):
        build_rows(["toolgym/Nope-v0"], n=1)


def test_cli_export_writes_and_summarises(tmp_path, capsys):
    code = main(
        [
            "export",
            "verl",
            "--env",
            "toolgym/Calculator-v0",
            "--env",
            "toolgym/Math-v0",
            "-k",
            "max_turns=3",
            "--n",
            "4",
            "--split",
            "val",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "wrote 4 val rows" in out and "toolgym/Calculator-v0: 2" in out and "toolgym/Math-v0: 2" in out
    rows = pq.read_table(tmp_path / "val.parquet").to_pylist()
    assert {json.loads(r["extra_info"]["env_kwargs"])["max_turns"] for r in rows} == {3}
    assert main(["export", "verl", "--env", "toolgym/Nope-v0", "--n", "1", "--out", str(tmp_path)]) == 2
    assert "toolgym list" in capsys.readouterr().err

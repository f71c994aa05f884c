"""The TRL rollout function's episode dump: every N steps a sample of the episodes it returned, as
``toolgym view`` reads them (the same tokens and mask the trainer got, whether the loss used each)."""

from __future__ import annotations

from toolgym.rollout import EnvRequest
from toolgym.rollout.dump import DumpSettings
from toolgym.testing.scripted import ScriptedClient
from toolgym.trainers.trl_adapter import make_rollout_func, prompt_dataset
from toolgym.trainers.trl_adapter.config import TRLTrainConfig
from toolgym.trainers.trl_adapter.launch import episode_dump
from toolgym.viewer import load

from .test_rollout import fake_trainer


def test_every_nth_step_writes_a_sample_the_viewer_opens(renderer, tmp_path):
    envs = [EnvRequest(id="toolgym/Calculator-v0")]
    prompts = prompt_dataset(envs, 3, seed=0)["prompt"]
    client = ScriptedClient(renderer, ["<answer>1</answer>"] * 30)
    settings = DumpSettings(directory=str(tmp_path / "episodes"), every=2, episodes=2)
    rollout = make_rollout_func(envs, client=client, dump=settings)
    outputs = {}
    for step in range(5):
        outputs[step] = rollout(
            prompts, fake_trainer(renderer.tokenizer, state=type("S", (), {"global_step": step}))
        )

    loaded = load(tmp_path / "episodes")
    assert loaded.kind == "dump"
    assert [e.step for e in loaded.episodes] == [0, 0, 2, 2, 4, 4]  # steps 0, 2, 4; two episodes each
    first = loaded.episodes[0].trajectory
    assert first.response_ids == outputs[0]["completion_ids"][0]
    assert first.response_mask == outputs[0]["env_mask"][0]
    assert all(e.trained for e in loaded.episodes) and first.verdict is not None


def test_the_config_puts_the_dump_in_the_run_dir(tmp_path):
    base = {"model": "tiny", "envs": [{"id": "toolgym/Calculator-v0"}]}
    assert episode_dump(TRLTrainConfig(**base), tmp_path) is None
    settings = episode_dump(TRLTrainConfig(**base, dump_every=5, dump_episodes=3), tmp_path)
    assert settings == DumpSettings(directory=str(tmp_path.resolve() / "episodes"), every=5, episodes=3)

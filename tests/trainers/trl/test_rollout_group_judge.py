"""TRL's rollout function judges each GRPO group (consecutive prompts with one episode key) of an env whose
verifier judges groups in one request, after the call's episodes; the scripted judge's
``reference_overlap``: 10 per criterion when the answer has every word of the reference, else 2."""

import gymnasium as gym
import pytest

from toolgym.rollout import EnvRequest
from toolgym.rollout.models import make_renderer
from toolgym.testing.judge_server import scripted_judge
from toolgym.testing.scripted import ScriptedClient, oracle_script, script_texts
from toolgym.trainers.trl_adapter import make_rollout_func, prompt_dataset
from toolgym.trainers.trl_adapter.data import key_of_prompt

from .test_rollout import fake_trainer

ENV = "toolgym/Report-v0"
GROUP = 3


@pytest.mark.parametrize("group", [True, False])
def test_each_group_is_judged_in_one_request(group):
    renderer = make_renderer("tiny")
    with scripted_judge(mode="reference_overlap") as judge:
        settings = {"base_url": judge.url, "model": "scripted", "group": group}
        request = EnvRequest(id=ENV, kwargs={"judge": settings})
        dataset = prompt_dataset(request, 2)
        prompts = [p for p in dataset["prompt"] for _ in range(GROUP)]
        env = gym.make(ENV, judge=settings)
        tasks = {key_of_prompt(p).task.prompt: key_of_prompt(p).task for p in dataset["prompt"]}

        def policy(request_id, turn, prompt_text):
            sample = int(request_id.rsplit("-", 1)[1]) % GROUP
            task = next(t for p, t in tasks.items() if p in prompt_text)
            *calls, reference = script_texts(env, oracle_script(ENV, task))
            if turn < len(calls):
                return calls[turn]
            parser = env.unwrapped.parser
            partial = parser.format_answer(f"{task.data['name']}: {task.data['facts'][0][0]}.")
            return [reference, partial, parser.format_answer("I do not know.")][sample]

        rollout = make_rollout_func(request, client=ScriptedClient(renderer, policy))
        out = rollout(prompts, fake_trainer(renderer.tokenizer))
        assert out["env_reward"] == pytest.approx([1.0, 0.2, 0.0] * 2)
        # one request per group of the two answers past the gate, or one per answer without group judging
        assert judge.count == (2 if group else 4)
        if group:
            ranks = [t.verdict.details.get("rank") for t in rollout.last_trajectories]
            assert ranks == [1, 2, None] * 2
        rollout.close()

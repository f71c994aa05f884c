"""Real GRPO steps through the adapter (TRL's ``GRPOTrainer`` on the tiny model, CPU): the batch TRL trains on
is checked where TRL applies the loss mask.

A scripted policy plays correct (even samples) and wrong (odd samples) solutions, so every group has
rewards 1 and 0; that proves the rewards and advantages reach the right samples and that only the tokens the
policy generated are trained on, while the model's parameters move. The trainer's own model (the default
backend) plays the Calculator test's episodes in the last test, where its sampled logprobs are checked
against the model TRL trains.
"""

import gymnasium as gym
import pytest
import torch

from toolgym.testing.scripted import ScriptedClient, oracle_script, script_texts, wrong_script
from toolgym.trainers.trl_adapter import make_rollout_func, prompt_dataset
from toolgym.trainers.trl_adapter.data import key_of_prompt

GROUP = 4


def mixed_policy(env_id, dataset):
    """Episode ``i`` of a call plays the oracle when ``i`` is even, a wrong final answer when odd."""
    env = gym.make(env_id)
    tasks = [key_of_prompt(p).task for p in dataset["prompt"]]
    good = {t.prompt: script_texts(env, oracle_script(env_id, t)) for t in tasks}
    bad = {t.prompt: script_texts(env, wrong_script(env_id, t)) for t in tasks}
    env.close()

    def policy(request_id, turn, prompt_text):
        scripts = bad if int(request_id.rsplit("-", 1)[1]) % 2 else good
        steps = next(s for prompt, s in scripts.items() if prompt in prompt_text)
        return steps[min(turn, len(steps) - 1)]

    return policy


def _params(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env_id", "budget"),
    [("toolgym/Calculator-v0", (256, 64)), ("toolgym/PythonCode-v0", (2560, 1600))],
    ids=["Calculator", "PythonCode"],
)
def test_grpo_trains_on_generated_tokens_with_the_verifiers_rewards(env_id, budget, make_trainer, renderer):
    response, per_turn = budget
    dataset = prompt_dataset(env_id, 2, seed=0)
    client = ScriptedClient(renderer, mixed_policy(env_id, dataset))
    rollout = make_rollout_func(env_id, client=client, max_tokens_per_turn=per_turn)
    trainer, spy = make_trainer(
        rollout, dataset, steps=3, group=GROUP, batch=2 * GROUP, max_completion_length=response
    )
    before = _params(trainer)
    trainer.train()

    # the parameters moved
    after = _params(trainer)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert len(spy.calls) == 3
    turns_by_session = {}
    for session, ids in zip(client.request_ids, client.generated, strict=True):
        turns_by_session.setdefault(session, []).append(ids)

    for call in spy.calls:
        trajs = call["trajectories"]
        # GRPO groups: GROUP samples in a row play one task from one reset (same prompt tokens)
        assert len(trajs) == 2 * GROUP
        groups = [trajs[i : i + GROUP] for i in range(0, len(trajs), GROUP)]
        for group in groups:
            assert len({t.task_id for t in group}) == 1 and len({tuple(t.prompt_ids) for t in group}) == 1
        assert groups[0][0].task_id != groups[1][0].task_id
        # the verifier's verdicts: even samples solved, odd ones not
        for i, t in enumerate(trajs):
            assert t.trainable and t.verdict.passed == (i % 2 == 0) and t.reward == t.verdict.reward
        for completion, loss_mask, advantage, traj in spy.rows(call):
            # TRL's loss mask is 1 exactly on what the policy generated, turn by turn, in order
            generated = turns_by_session[f"trl-{call['call']}-{traj.sample}"]
            assert [t for t, m in zip(completion, loss_mask, strict=True) if m] == [
                t for turn in generated for t in turn
            ]
            assert len(completion) <= response and all(len(g) <= per_turn for g in generated)
            # ... and 0 on every observation token: the tool outputs are there, outside the mask
            outside = renderer.decode([t for t, m in zip(completion, loss_mask, strict=True) if not m])
            outputs = [r.output for turn in traj.turns for r in turn.tool_results]
            assert outputs and all(o.strip() in outside for o in outputs)
            assert loss_mask[-1] == 1  # the completion ends on a generated token
            # the advantage has the sign of the sample's reward against its group's mean (0.5)
            assert (advantage > 0) == traj.verdict.passed and abs(advantage) > 0.1
    # the rewards TRL logged for the last batch are the env's verdicts, sample by sample
    logged = list(trainer._logs["rewards"]["env_reward"])[-2 * GROUP :]
    assert logged == [t.verdict.reward for t in spy.calls[-1]["trajectories"]]


@pytest.mark.slow
def test_the_trainers_own_model_plays_within_the_budgets(make_trainer):
    """The default backend: the policy TRL trains generates the episodes (its sampled logprobs are the
    trained model's own), every turn within ``max_tokens_per_turn`` and each completion within
    ``max_completion_length``, which TRL does not enforce itself."""
    env_id = "toolgym/Calculator-v0"
    dataset = prompt_dataset(env_id, 2, seed=1)
    rollout = make_rollout_func(env_id, max_tokens_per_turn=12)
    trainer, spy = make_trainer(
        rollout, dataset, steps=1, group=GROUP, batch=2 * GROUP, max_completion_length=48
    )
    trainer.train()

    (call,) = spy.calls
    model = call["model"]
    for completion, loss_mask, _, traj in spy.rows(call):
        assert len(completion) <= 48 and traj.trainable
        runs, run = [], 0
        for m in [*loss_mask, 0]:
            if m:
                run += 1
            elif run:
                runs, run = [*runs, run], 0
        assert runs and max(runs) <= 12
        # the generated tokens' logprobs are the trained model's (raw logits, before temperature)
        ids = torch.tensor([traj.prompt_ids + traj.response_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(traj.prompt_ids) - 1 : -1].float()
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(traj.response_ids)[:, None])[:, 0]
        mask = torch.tensor(traj.response_mask, dtype=torch.bool)
        assert torch.allclose(torch.tensor(traj.logprobs)[mask], expected[mask], atol=1e-4)

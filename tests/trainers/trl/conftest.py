"""What the TRL tests share: a GRPO trainer on the tiny model (CPU), and a spy on the loss that records the
batch TRL trains on, with the trajectories the rollout function returned for it."""

import os

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


class LossSpy:
    """Wraps ``trainer._compute_loss``: every call's inputs (detached) and the rollout's trajectories."""

    def __init__(self, trainer, rollout_func):
        self.calls = []
        self.rollout_func = rollout_func
        inner = trainer._compute_loss

        def spy(model, inputs):
            self.calls.append(
                {
                    "model": model,
                    "inputs": {k: v.detach().clone() for k, v in inputs.items() if hasattr(v, "detach")},
                    "trajectories": list(getattr(rollout_func, "last_trajectories", [])),
                    "call": getattr(rollout_func, "last_call", None),
                }
            )
            return inner(model, inputs)

        trainer._compute_loss = spy

    def rows(self, call):
        """Each trained row unpadded: (completion ids, the mask the loss applies, advantage, trajectory)."""
        inputs = call["inputs"]
        ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        tool_mask = inputs.get("tool_mask")
        loss_mask = completion_mask if tool_mask is None else completion_mask * tool_mask
        by_response = {tuple(t.response_ids): t for t in call["trajectories"]}
        out = []
        for i in range(ids.shape[0]):
            n = int(completion_mask[i].sum())
            row = ids[i, :n].tolist()
            out.append(
                (row, loss_mask[i, :n].tolist(), float(inputs["advantages"][i]), by_response[tuple(row)])
            )
        return out


@pytest.fixture(scope="session")
def tiny_path():
    from toolgym.testing import tiny_model_path

    return str(tiny_model_path())


@pytest.fixture
def make_trainer(tmp_path, tiny_path):
    """``make_trainer(rollout_func, dataset, steps=, group=, batch=, lr=, **config)`` -> (trainer, spy)."""

    def make(rollout_func, dataset, *, steps=3, group=4, batch=8, lr=1e-3, max_completion_length=256, **kw):
        from transformers import AutoTokenizer
        from trl import GRPOConfig, GRPOTrainer

        from toolgym.trainers.trl_adapter import env_reward

        config = GRPOConfig(
            output_dir=str(tmp_path / "grpo"),
            use_cpu=True,
            bf16=False,
            gradient_checkpointing=False,
            per_device_train_batch_size=batch,
            num_generations=group,
            max_steps=steps,
            max_completion_length=max_completion_length,
            learning_rate=lr,
            lr_scheduler_type="constant",
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
            **kw,
        )
        trainer = GRPOTrainer(
            model=tiny_path,
            reward_funcs=env_reward,
            args=config,
            train_dataset=dataset,
            processing_class=AutoTokenizer.from_pretrained(tiny_path),
            rollout_func=rollout_func,
        )
        return trainer, LossSpy(trainer, rollout_func)

    return make

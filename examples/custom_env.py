"""A custom env from your own JSONL tasks and your own verifier, registered so ``gym.make`` finds it.

Columns ``id``, ``prompt`` and ``answer`` become the Task's fields; any other column (``tolerance`` here) goes
to ``task.data``, which the verifier reads and the model never sees.

    python examples/custom_env.py
"""

import json
import tempfile
from pathlib import Path

import gymnasium as gym

import toolgym


class WithinTolerance(toolgym.Verifier):
    """Full reward when the answer is within the task's relative tolerance of the gold number."""

    name = "within_tolerance"

    def verify(self, task, answer, trajectory=None):
        try:
            value = float(answer.replace(",", ""))
        except ValueError:  # not a number: a wrong answer, said so in the details
            return toolgym.Verdict(reward=0.0, passed=False, details={"reason": f"not a number: {answer!r}"})
        error = abs(value - task.answer) / abs(task.answer)
        ok = error <= task.data["tolerance"]
        return toolgym.Verdict(reward=float(ok), passed=ok, details={"relative_error": round(error, 4)})


@toolgym.register_env("mine/Units-v0", tools=["calculator"], description="Unit conversions, 1% tolerance.")
def make_units_env(tasks: str, **kwargs):
    return toolgym.make_env(tasks, tools=["calculator"], verifier=WithinTolerance(), **kwargs)


def main() -> None:
    rows = [
        {"id": "days", "prompt": "How many seconds are in 3 days?", "answer": 259200, "tolerance": 0.01},
        {"id": "miles", "prompt": "How many km is 26.2 miles?", "answer": 42.165, "tolerance": 0.01},
    ]
    path = Path(tempfile.mkdtemp()) / "units.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))

    env = gym.make("mine/Units-v0", tasks=str(path), max_turns=4)
    for name, actions in [
        ("correct", ["<calculator>3 * 24 * 60 * 60</calculator>", "<answer>259200</answer>"]),
        ("wrong", ["<answer>250000</answer>"]),  # 3.5% off: outside the 1% tolerance
    ]:
        env.reset(options={"task_id": "days"})
        for action in actions:
            _, reward, _, _, info = env.step(action)
        print(f"{name} episode: reward {reward}  details {info['verdict'].details}")
    env.close()


if __name__ == "__main__":
    main()

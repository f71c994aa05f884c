"""Play toolgym envs from Python with hand-written actions: no model, just the Gymnasium API.

Each action is the text a model would write (the ``xml`` format: ``<calculator>…</calculator>``,
``<python>…</python>``, ``<answer>…</answer>``); each ``step`` returns the observation the model would read
next, the reward, and ``info["verdict"]`` once the episode ends.

    python examples/play_by_hand.py
"""

import gymnasium as gym

import toolgym


def play(env: gym.Env, actions: list[str], **reset_kwargs) -> float:
    """Reset ``env``, send ``actions`` one by one, print what comes back; return the final reward."""
    obs, info = env.reset(**reset_kwargs)
    print(f"--- {env.spec.id}, task {info['task_id']}\nprompt: {obs[:200]}")
    reward = 0.0
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        print(f"action: {action!r}\nobservation: {obs!r}")
        if terminated or truncated:
            break
    verdict = info["verdict"]
    print(f"reward {reward}  passed {verdict.passed}  details {verdict.details}\n")
    return reward


def main() -> None:
    # Calculator-v0 with a task we write ourselves (options={"task": ...}), so the actions below fit it.
    calculator = gym.make("toolgym/Calculator-v0", max_turns=4)
    bolts = toolgym.Task(id="bolts", prompt="99 machines make 603 bolts a day. In 60 days?", answer=3581820)
    play(
        calculator,
        [
            "Let me compute. <calculator>99 * 603 * 60</calculator>",  # a tool call; its output comes back
            "<calculator>99 x 603</calculator>",  # a bad expression: its error comes back, nothing raises
            "<answer>3,581,820</answer>",  # the answer ends the episode; the verifier accepts 3,581,820
        ],
        options={"task": bolts},
    )
    calculator.close()

    # PythonCode-v0 on HumanEval/0: define the function in the sandbox, try it, submit it to the hidden tests.
    python = gym.make("toolgym/PythonCode-v0")
    code = (
        "def has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n"
    )
    play(
        python,
        [
            f"<python>{code}</python>",  # the interpreter session keeps state across turns
            "<python>print(has_close_elements([1.0, 2.8, 3.0], 0.3))</python>",
            f"<answer>{code}</answer>",
        ],
        options={"task_id": "HumanEval/0"},
    )
    # A wrong submission: it returns the opposite, so most hidden tests fail and the reward drops.
    wrong = code.replace("return any(", "return not any(")
    play(python, [f"<answer>{wrong}</answer>"], options={"task_id": "HumanEval/0"})
    python.close()


if __name__ == "__main__":
    main()

"""A seed names the same episode in every process: thread counts and string hashing change nothing.

Two fresh interpreters, one with ``OMP_NUM_THREADS=1 PYTHONHASHSEED=1`` and one with ``OMP_NUM_THREADS=2
PYTHONHASHSEED=2``, play the start of a few seeds of every registered env: the reset (prompt, messages, tool
schemas) and the observations of the oracle's tool calls (for the Search envs, ranked lists of documents,
some with tied scores). They must print the same JSON. This catches set or dict order reaching an observation
or a task draw, ``hash()`` of strings used as a seed, float sums whose order follows the thread count, and
unstable sort kernels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import toolgym

SEEDS = (0, 1, 2)
ENV_IDS = sorted(i for i in toolgym.ENVS if i.startswith("toolgym/"))

PLAY = """
import json, sys

import gymnasium as gym

import toolgym
from toolgym.core.types import ToolCall
from toolgym.testing.scripted import oracle_script, script_texts

# a result without its timings (metadata keys ending in _s, such as the sandbox's wait_s): how long a call
# waited depends on the machine's load, not on the seed
def untimed(result):
    meta = {k: v for k, v in (result.get("metadata") or {}).items() if not k.endswith("_s")}
    return {**result, "metadata": meta}


out = {}
for env_id in json.loads(sys.argv[1]):
    try:
        env = gym.make(env_id)
    except ImportError as exc:  # an optional extra that is not installed: the same in both processes
        out[env_id] = f"unavailable: {exc}"
        continue
    for seed in json.loads(sys.argv[2]):
        _, info = env.reset(seed=seed)
        calls = [step for step in oracle_script(env_id, env.unwrapped.task) if isinstance(step, ToolCall)]
        steps = [env.step(text) for text in script_texts(env, calls)]
        out[f"{env_id} seed={seed}"] = {
            "task_id": info["task_id"],
            "messages": list(info["messages"]),  # a MessagesView: a list for json.dumps
            "tools": info["tools"],
            "observations": [step[0] for step in steps],
            "tool_results": [
                untimed(r.model_dump(mode="json")) for step in steps for r in step[4]["tool_results"]
            ],
        }
    env.close()
print(json.dumps(out, sort_keys=True))
"""


def test_every_env_starts_the_same_with_other_thread_counts_and_hash_seeds():
    settings = (
        {"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "1"},
        {"OMP_NUM_THREADS": "2", "PYTHONHASHSEED": "2"},
    )
    args = [json.dumps(ENV_IDS), json.dumps(SEEDS)]
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", PLAY, *args],
            env={**os.environ, **setting},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for setting in settings
    ]
    outputs = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
        outputs.append(json.loads(stdout))
    first, second = outputs
    assert set(first) == set(second)
    played = [key for key, value in first.items() if isinstance(value, dict)]
    assert len(played) >= 3 * len(SEEDS), first  # Calculator, Math, Search... always install with the core
    assert all(first[key]["observations"] and all(first[key]["observations"]) for key in played)
    for key in first:
        assert first[key] == second[key], f"{key} differs between the two processes"

"""Play toolgym envs through SkyRL-Gym, the way SkyRL's generator does, with each env's oracle.

In a SkyRL training run:
  1. write the data with toolgym.trainers.skyrl_adapter.export_skyrl("toolgym/Calculator-v0", n=1024,
     out="data") (columns prompt, env_class, data_source, toolgym); data.train_data=data/train.parquet
  2. in your SkyRL entrypoint, before the generator is built:  register_all()
  3. train with environment.env_class=toolgym/Calculator-v0 (rows name their env_class anyway).
Here the model is replaced by the env's scripted oracle, so every episode should end with reward 1.0.

    python examples/skyrl_env.py [--env toolgym/Calculator-v0] [--n 3] [--action-format xml]
"""

import argparse

import gymnasium as gym
import skyrl_gym

from toolgym.rollout.keys import EpisodeKey
from toolgym.testing.scripted import oracle_script, script_texts
from toolgym.trainers.skyrl_adapter import register_all, skyrl_rows

parser = argparse.ArgumentParser()
parser.add_argument("--env", default="toolgym/Calculator-v0")
parser.add_argument("--n", type=int, default=3)
parser.add_argument("--action-format", default="xml")
args = parser.parse_args()

register_all()  # every toolgym env is now a SkyRL-Gym env under its own id
rows = skyrl_rows([{"id": args.env, "kwargs": {"action_format": args.action_format}}], args.n)

for row in rows:
    # what SkyRL's generator does per sample: extras = the row's columns but prompt and env_class
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=extras)
    chat, _ = env.init(row["prompt"])  # the env's system prompt and task

    # the "model": the env's oracle, written in the env's action format
    key = EpisodeKey.from_json(row["toolgym"])
    actions = script_texts(gym.make(key.env_id, **key.env_kwargs), oracle_script(key.env_id, key.task))
    for action in actions:
        out = env.step(action)  # {observations: chat messages, reward, done, metadata}
        chat += [{"role": "assistant", "content": action}, *out["observations"]]
        if out["done"]:
            break
    print(f"{key.task.id}: reward={out['reward']} messages={len(chat)} metrics={env.get_metrics()}")
    env.close()

"""examples/openenv_client.py: our server for an env, an episode played with OpenEnv's generic client."""

import runpy
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "openenv_client.py"


def test_the_example_plays_an_episode_to_reward_one(capsys):
    main = runpy.run_path(str(EXAMPLE), run_name="example")["main"]
    assert main(["--env", "toolgym/Calculator-v0", "--seed", "2"]) == 1.0
    out = capsys.readouterr().out
    assert "[task calculator-" in out and "reward 1.0 (passed: True)" in out

"""toolgym-debug/Probe-v0, the trainers' learning fixture: every episode has the same shape whatever the
model samples, so that a trainer's test can hold each sample to it (two turns, one probe, two trained
tokens with the observation between them)."""

from toolgym.rollout.models import make_renderer
from toolgym.testing.probe import make_probe_env


def test_every_token_of_the_tiny_model_as_a_first_turn_is_a_probe_and_the_episode_has_two_turns():
    """The first turn is a call by position: blank text, and text the base parser strips to nothing as
    reasoning (``<think>``, ``</think>``: they once made an invalid first turn whose feedback overflowed
    TRL's async test's response budget), are probes too."""
    renderer = make_renderer("tiny")
    env = make_probe_env()
    shapes = {}
    for token in range(len(renderer.tokenizer)):
        env.reset(seed=token)
        first = renderer.action_text([token])
        _, _, terminated, truncated, _ = env.step(first)
        assert not (terminated or truncated), (token, first)
        _, reward, terminated, _, _ = env.step("s")
        trajectory = env.trajectory
        shapes[token] = (len(trajectory.turns), trajectory.tool_calls, terminated, reward)
    assert set(shapes.values()) == {(2, 1, True, 1.0)}, {
        t: s for t, s in shapes.items() if s != (2, 1, True, 1.0)
    }

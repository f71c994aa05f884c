"""Adapters onto RL trainers. Each imports its trainer lazily (``import toolgym`` never imports verl or TRL)
and none re-implements the episode runner: each gives the runner an ``LLMClient`` over the trainer's own
engine and turns the resulting ``Trajectory`` into what the trainer consumes."""

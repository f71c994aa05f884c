"""The built-in envs. Importing this package registers each of them (``toolgym/<Name>-v0``)."""

from toolgym.envs import calculator, math, reasoning_gym, search

__all__ = ["calculator", "math", "reasoning_gym", "search"]

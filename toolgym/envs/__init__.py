"""The built-in envs. Importing this package registers each of them (``toolgym/<Name>-v0``)."""

from toolgym.envs import calculator, search

__all__ = ["calculator", "search"]

"""The built-in envs. Importing this package registers each of them (``toolgym/<Name>-v0``)."""

from toolgym.envs import calculator, math, python_code, reasoning_gym, report, search, sql, swe, terminal

__all__ = ["calculator", "math", "python_code", "reasoning_gym", "report", "search", "sql", "swe", "terminal"]

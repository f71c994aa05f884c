"""The built-in envs, registered with Gymnasium by name without importing them.

``import toolgym`` must be quick (it is the first command a user runs, and every worker's): the env modules
import their tools, verifiers and task sources (pydantic, the sandbox, pyarrow, the procedural worlds), so
each built-in is registered here with a string entry point, and its module is imported by the first
``gym.make`` of one of its ids (whose ``@register_env`` then records the env's catalogue entry: tools, task
source, oracle). ``toolgym.ENVS`` imports them all on its first read. ``tests/envs/test_registered_envs.py``
checks that each entry point below is the factory its module registers under that id.
"""

from __future__ import annotations

#: env id -> the ``module:factory`` that makes it
BUILTIN_ENVS: dict[str, str] = {
    "toolgym/Calculator-v0": "toolgym.envs.calculator:make_calculator_env",
    "toolgym/Math-v0": "toolgym.envs.math:make_math_env",
    "toolgym/PythonCode-v0": "toolgym.envs.python_code:make_python_code_env",
    "toolgym/ReasoningGym-v0": "toolgym.envs.reasoning_gym:make_reasoning_gym_env",
    "toolgym/Report-v0": "toolgym.envs.report:make_report_v0",
    "toolgym/Search-v0": "toolgym.envs.search:make_search_v0",
    "toolgym/SearchMultiHop-v0": "toolgym.envs.search:make_search_multihop_v0",
    "toolgym/SQL-v0": "toolgym.envs.sql:make_sql_env",
    "toolgym/SWE-v0": "toolgym.envs.swe:make_swe_env",
    "toolgym/Terminal-v0": "toolgym.envs.terminal:make_terminal_env",
}


__all__ = ["BUILTIN_ENVS"]

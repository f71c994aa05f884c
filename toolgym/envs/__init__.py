"""The built-in envs, registered with Gymnasium by name without importing them.

``import toolgym`` must be quick (it is the first command a user runs, and every worker's): the env modules
import their tools, verifiers and task sources (pydantic, the sandbox, pyarrow, the procedural worlds). So
what they declare (``@register_env``: the factory, tools, task source, description; ``register_tool``: each
tool's summary) is written as plain literals into ``toolgym/envs/_catalogue.py`` by
``python -m toolgym.envs.catalogue``; ``import toolgym`` registers each built-in from that table with a string
entry point, and ``toolgym list`` prints it. An env's module is imported by the first ``gym.make`` of one of
its ids (whose ``@register_env`` then records the env's full spec: the factory, the oracle);
``toolgym.ENVS`` imports them all on its first read. ``tests/envs/test_catalogue.py`` fails, naming that
command, when the table no longer says what the modules declare.
"""

from __future__ import annotations

from toolgym.envs._catalogue import ENVS as BUILTIN_CATALOGUE
from toolgym.envs._catalogue import TOOLS as BUILTIN_TOOLS

#: env id -> the ``module:factory`` that makes it (from the generated table)
BUILTIN_ENVS: dict[str, str] = {env_id: row["entry_point"] for env_id, row in BUILTIN_CATALOGUE.items()}


__all__ = ["BUILTIN_CATALOGUE", "BUILTIN_ENVS", "BUILTIN_TOOLS"]

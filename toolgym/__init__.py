"""toolgym: registered Gymnasium text environments for tool-using LLM agents, with built-in verifiers.

``import toolgym`` registers every built-in env under the ``toolgym/`` namespace and loads third-party plugins
(entry-point groups ``toolgym.tools`` and ``toolgym.envs``)::

    import gymnasium as gym, toolgym
    env = gym.make("toolgym/Calculator-v0")
"""

from importlib.metadata import PackageNotFoundError, version

from toolgym import envs as _builtin_envs  # noqa: F401 - registers the built-in envs
from toolgym.core.registry import ENVS, load_plugins, register_env
from toolgym.core.task import ListSource, ProceduralSource, Task, TaskSource
from toolgym.core.types import ParsedAction, ToolCall, ToolResult, Trajectory, Verdict
from toolgym.envs.base import ToolEnv
from toolgym.envs.compose import make_env
from toolgym.envs.task_files import FieldMap, load_tasks
from toolgym.parsers import make_parser, register_parser
from toolgym.rewards.base import Verifier
from toolgym.tools.base import TOOLS, Tool, make_tool, register_tool
from toolgym.tools.function import tool

try:
    __version__ = version("toolgym")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

load_plugins()

__all__ = [
    "ENVS",
    "TOOLS",
    "FieldMap",
    "ListSource",
    "ParsedAction",
    "ProceduralSource",
    "Task",
    "TaskSource",
    "Tool",
    "ToolCall",
    "ToolEnv",
    "ToolResult",
    "Trajectory",
    "Verdict",
    "Verifier",
    "__version__",
    "load_tasks",
    "make_env",
    "make_parser",
    "make_tool",
    "register_env",
    "register_parser",
    "register_tool",
    "tool",
]

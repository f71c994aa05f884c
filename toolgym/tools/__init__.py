"""Tools the model can call. Importing this package registers the built-in tools by name, and installs
``Tool.from_function``'s maker (``toolgym.tools.function``)."""

from toolgym.tools import bash, calculator, editor, function, python, search
from toolgym.tools.base import TOOLS, Tool, make_tool, register_tool
from toolgym.tools.mcp import mcp_tools

__all__ = [
    "TOOLS",
    "Tool",
    "bash",
    "calculator",
    "editor",
    "function",
    "make_tool",
    "mcp_tools",
    "python",
    "register_tool",
    "search",
]

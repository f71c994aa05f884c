"""Tools the model can call. Importing this package registers the built-in tools by name."""

from toolgym.tools import bash, calculator, editor, python, search
from toolgym.tools.base import TOOLS, Tool, make_tool, register_tool
from toolgym.tools.mcp import mcp_tools

__all__ = [
    "TOOLS",
    "Tool",
    "bash",
    "calculator",
    "editor",
    "make_tool",
    "mcp_tools",
    "python",
    "register_tool",
    "search",
]

"""Action formats: how a model's turn becomes tool calls or a final answer, one module per format.

``PARSERS`` maps format names to parser classes; ``make_parser(name, tools)`` builds one bound to an
env's tools, and ``register_parser`` adds a format (third-party formats use the same decorator). The registry
lives in ``base.py`` next to the protocol, as the tool registry does in ``toolgym.tools.base``; importing this
package registers the built-in formats.
"""

from toolgym.parsers.base import (
    ERROR_MARKER,
    PARSERS,
    ActionParser,
    InvalidAction,
    make_parser,
    register_parser,
    strip_reasoning,
)
from toolgym.parsers.hermes import HermesParser
from toolgym.parsers.json_format import JsonParser
from toolgym.parsers.markdown import MarkdownParser
from toolgym.parsers.react import ReactParser
from toolgym.parsers.xml_tags import XmlParser

__all__ = [
    "ERROR_MARKER",
    "PARSERS",
    "ActionParser",
    "HermesParser",
    "InvalidAction",
    "JsonParser",
    "MarkdownParser",
    "ReactParser",
    "XmlParser",
    "make_parser",
    "register_parser",
    "strip_reasoning",
]

"""The registry of action formats: PARSERS, register_parser, make_parser."""

from __future__ import annotations

import pytest

from toolgym.core.types import ParsedAction
from toolgym.parsers import (
    PARSERS,
    ActionParser,
    HermesParser,
    JsonParser,
    MarkdownParser,
    ReactParser,
    XmlParser,
    make_parser,
    register_parser,
)


def test_the_built_in_formats_are_registered():
    assert {
        "xml": XmlParser,
        "hermes": HermesParser,
        "json": JsonParser,
        "react": ReactParser,
        "markdown": MarkdownParser,
    }.items() <= PARSERS.items()


def test_make_parser_binds_the_tools_and_passes_options(tools):
    parser = make_parser("xml", tools, result_tag="information", max_action_chars=50)
    assert isinstance(parser, XmlParser)
    assert list(parser.tools) == ["calculator", "python", "search", "lookup"]
    assert parser.result_tag == "information"
    assert parser.max_action_chars == 50


def test_an_unknown_format_lists_the_known_ones(tools):
    with pytest.raises(KeyError) as excinfo:
        make_parser("yaml", tools)
    message = str(excinfo.value)
    assert "yaml" in message
    for name in ("hermes", "json", "markdown", "react", "xml"):
        assert name in message


@pytest.fixture
def restore_registry():
    before = dict(PARSERS)
    yield
    PARSERS.clear()
    PARSERS.update(before)


def test_third_parties_register_formats_with_the_decorator(tools, restore_registry):
    @register_parser
    class Shout(XmlParser):
        name = "shout"

        def format_answer(self, answer: str) -> str:
            return super().format_answer(answer.upper())

    assert PARSERS["shout"] is Shout
    parser = make_parser("shout", tools)
    assert isinstance(parser, ActionParser)
    assert parser.parse(parser.format_answer("hi")) == ParsedAction.final("HI")
    assert register_parser(Shout) is Shout  # registering the same class again is harmless


def test_a_taken_name_cannot_be_registered_by_another_class(restore_registry):
    class Impostor(JsonParser):
        name = "xml"

    with pytest.raises(ValueError, match="already registered"):
        register_parser(Impostor)
    assert PARSERS["xml"] is XmlParser

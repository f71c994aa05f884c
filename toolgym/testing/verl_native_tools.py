"""toolgym-debug/Probe-v0's tool and format for verl's own multi-turn loop (``ToolAgentLoop``): a verl
function tool and a verl tool parser, loaded by path through ``multi_turn.function_tool_path``
(``toolgym.testing.verl_native`` sets it). verl executes this file in each agent-loop worker before it builds
its loops, so the parser registers there too. Never import it as a module as well: verl refuses a second
``probe`` function.

- ``probe``: the probe's tool as a verl function tool, with the schema of toolgym's ``ProbeTool`` and the same
  output (``probed``).
- ``toolgym_probe`` (the parser, ``multi_turn.format``): every turn is a call of ``probe`` with the turn's
  text as its note, as toolgym's ``ProbeParser`` reads the first turn; the loop's ``max_assistant_turns=2``
  ends the episode after the second turn, the answer, before it is parsed. Its stop tokens are the whole
  vocabulary, so every turn is one generated token: what ``max_tokens_per_turn: 1`` gives toolgym's loop
  (verl's loop has no per-turn budget of its own).
"""

from __future__ import annotations

import json

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.function_tool import function_tool

from toolgym.testing.probe import ProbeTool
from toolgym.testing.verl_native import PARSER_NAME


@function_tool(ProbeTool.name, schema=ProbeTool().schema())
def probe(note: str = "") -> str:
    return ProbeTool().run(ProbeTool.Args(note=note)).output


@ToolParser.register(PARSER_NAME)
class ProbeToolParser(ToolParser):
    """Every turn calls ``probe``; every token stops generation (one token a turn)."""

    @property
    def stop_token_ids(self) -> list[int]:
        return list(range(len(self.tokenizer)))

    async def extract_tool_calls(self, responses_ids, tools=None) -> tuple[str, list[FunctionCall]]:
        text = self.tokenizer.decode(responses_ids, skip_special_tokens=True)
        return text, [FunctionCall(name=ProbeTool.name, arguments=json.dumps({"note": text}))]

"""The names a verl row and toolgym's agent loops agree on, in a module that imports nothing (the package, the
exporter, the launcher and the agent loops all read them)."""

#: the agent loop's name: a row's ``agent_name`` column and the entry in the shipped agent-loop YAML
AGENT_NAME = "toolgym"
#: the gateway agent loop's (a user's agent program plays the row: ``gateway_loop.py``)
GATEWAY_AGENT_NAME = "toolgym_agent"
#: the ``extra_info`` field of a row that a user's agent program plays: the agent's spec
#: (``module:function`` or ``/path/to/file.py:function``), which the gateway loop loads
AGENT_FIELD = "agent"
#: how to write rows the agent loop can play (said by the error a row without an episode key gets)
ROWS_HINT = (
    "write the data with `toolgym export verl` (or give rows that toolgym's agent loop should not play "
    "another agent_name)"
)

"""The agent file for OpenRLHF: ``--train.agent_func_path`` names it, OpenRLHF imports it in every vLLM engine
actor and instantiates ``AgentExecutor()`` (``toolgym.trainers.openrlhf_adapter.agent_func_path()`` prints
where it is installed). Copy it to change the settings below."""

from toolgym.trainers.openrlhf_adapter.executor import ToolgymAgentExecutor


class AgentExecutor(ToolgymAgentExecutor):
    #: tokens one model turn may generate (None: OpenRLHF's ``--rollout.max_new_tokens``, else the budget)
    max_tokens_per_turn = None
    #: episodes one engine plays at once (each holds an env: a sandbox session, a search index)
    max_concurrent_episodes = 256

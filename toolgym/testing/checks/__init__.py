"""The checks of the env check kit, one function per named check; ``toolgym.testing.check`` runs them.

Each takes the kit's ``Context`` (how to open the env in each action format, the seeds, the oracle, the
recorder of every step taken) and returns a ``CheckResult``. What each looks for:

- **api**: gymnasium's ``check_env`` passes without warnings; the id and its kwargs round-trip through
  ``gym.make`` (the same env, the same first observation).
- **determinism**: the same seed gives the same task, first observation and messages, twice in a row and in a
  fresh instance; different seeds give different tasks (unless the source has one task); ``task_id`` and
  ``task`` options pin the task; the oracle's episode replays identically.
- **actions**: non-string actions, empty and whitespace turns, 1 MB of text, lone surrogates, control
  characters, deep nesting and malformed calls in every format give an invalid-action observation or a
  ``TypeError`` saying what an action must be; any other exception fails; the env stays usable.
- **observations**: for every tool in every format, failing calls (missing or mistyped arguments, inputs the
  tool refuses, an exception planted in the tool) show the error marker exactly once and a tool's own output
  never carries it; observations stay within the env's cap (a planted oversized output is cut); no host path
  or traceback frame of ours leaks into any observation the kit saw.
- **rewards**: the oracle earns the maximum reward; wrong, empty, garbage, echoed and hostile answers earn the
  minimum without a verifier error; the terminal reward equals the verdict's; at ``max_turns`` the episode is
  truncated (not terminated) with the minimum reward, and an answer on the last turn terminates it.
- **info**: every step's ``info`` has the same keys, in every episode, and the contract's keys; so does every
  reset's.
- **verifier_errors**: a verifier that raises surfaces as a verdict with ``error`` set, never a silent 0.
- **tokens** (with a tokenizer): the chat template keeps earlier turns an exact prefix, in strings and tokens,
  on a representative conversation and on the env's own, in every format.
- **timing**: step and verify latency percentiles, reported, never asserted.
"""

from toolgym.testing.checks.actions import check_actions
from toolgym.testing.checks.api import check_api, check_determinism
from toolgym.testing.checks.observations import check_observations
from toolgym.testing.checks.rewards import check_info, check_rewards, check_verifier_errors
from toolgym.testing.checks.tokens import check_timing, check_tokens

__all__ = [
    "check_actions",
    "check_api",
    "check_determinism",
    "check_info",
    "check_observations",
    "check_rewards",
    "check_timing",
    "check_tokens",
    "check_verifier_errors",
]

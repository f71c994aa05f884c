"""The env check kit: each check fails on an env with the defect it looks for (planted by a wrapper or a
patched env), and the kit passes on a sound env. Planted envs are checked in the xml format only (fast)."""

import json

import gymnasium as gym
import pytest
from transformers import AutoTokenizer

import toolgym
from toolgym.core.spaces import AnyText
from toolgym.core.types import ParsedAction, ToolCall, Turn
from toolgym.testing import CHECKS, EnvCheckError, check_toolenv, tiny_model_path
from toolgym.tools.calculator import Calculator

CALC = "toolgym/Calculator-v0"


def planted(wrapper, env_id=CALC):
    """A factory for ``env_id`` wrapped in ``wrapper`` (the kit calls it with ``action_format``)."""

    def make(action_format="xml"):
        return wrapper(gym.make(env_id, action_format=action_format))

    make.__name__ = wrapper.__name__
    return make


def run_kit(factory, **kwargs):
    kwargs.setdefault("formats", ["xml"])
    kwargs.setdefault("episodes", 3)
    return check_toolenv(factory, **kwargs)


def assert_fails(report, check, phrase):
    result = report[check]
    assert result.status == "failed", report.summary()
    assert phrase in " ".join(result.problems), result.describe()
    assert not report.ok and result in report.failures


# -- the defects, planted ------------------------------------------------------------------------------------


class DoublesErrorMarker(gym.Wrapper):
    def step(self, action):
        obs, *rest = self.env.step(action)
        return obs.replace("Error:", "Error: Error:"), *rest


class CalculatorThatMarksItsOwnErrors(Calculator):
    """The calculator as it was: its error output started with the marker the parser adds again."""

    def run(self, args):
        result = super().run(args)
        return result if result.ok else result.model_copy(update={"output": f"Error: {result.output}"})


def calculator_marking_its_own_errors(action_format="xml"):
    env = gym.make(CALC, action_format=action_format)
    inner = env.unwrapped
    inner.tools["calculator"] = inner.parser.tools["calculator"] = CalculatorThatMarksItsOwnErrors()
    return env


class IgnoresTheSeed(gym.Wrapper):
    def reset(self, *, seed=None, options=None):
        return self.env.reset(options=options)


class CrashesOnNone(gym.Wrapper):
    def step(self, action):
        return self.env.step(action.strip())


class RaisesValidationErrorOnNone(gym.Wrapper):
    """What ``step(None)`` did before: a pydantic error about an internal model."""

    def step(self, action):
        if not isinstance(action, str):
            Turn(action=action, parsed=ParsedAction.invalid("?"))
        return self.env.step(action)


class VagueTypeError(gym.Wrapper):
    def step(self, action):
        if not isinstance(action, str):
            raise TypeError("bad input")
        return self.env.step(action)


class ChangesInfoKeys(gym.Wrapper):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if info["tool_results"]:
            info = {**info, "tool_latency_s": 0.01}
        return obs, reward, terminated, truncated, info


class PaysWhatTheVerdictDoesNot(gym.Wrapper):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, 1.0 if terminated else reward, terminated, truncated, info


class EndsInsteadOfTruncating(gym.Wrapper):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated or truncated, False, info


class SilencesVerifierErrors(gym.Wrapper):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if info.get("verdict") is not None and info["verdict"].error:
            info["verdict"] = info["verdict"].model_copy(update={"error": None})
        return obs, reward, terminated, truncated, info


class LeaksATraceback(gym.Wrapper):
    def step(self, action):
        obs, *rest = self.env.step(action)
        if not all(r.ok for r in rest[-1]["tool_results"]):
            obs += f'\nTraceback (most recent call last):\n  File "{toolgym.__file__}", line 1, in step'
        return obs, *rest


class OverLongObservations(gym.Wrapper):
    def step(self, action):
        obs, *rest = self.env.step(action)
        return obs + "x" * 10_000, *rest


def with_too_small_observation_space(action_format="xml"):
    env = gym.make(CALC, action_format=action_format, disable_env_checker=True)
    env.unwrapped.observation_space = AnyText(10)  # prompts are longer: not in the declared space
    return env


THINK_STRIPPING_TEMPLATE = (
    "{%- for m in messages -%}{%- set c = m.content -%}"
    "{%- if m.role == 'assistant' and not loop.last and '</think>' in c -%}"
    "{%- set c = c.split('</think>')[-1] -%}{%- endif -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + c + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


DEFECTS = [
    (planted(DoublesErrorMarker), "observations", "appears 2 times for 1 failed call"),
    (calculator_marking_its_own_errors, "observations", "carries its own error marker"),
    (planted(LeaksATraceback), "observations", "a traceback frame with a host path"),
    (planted(OverLongObservations), "observations", "exceeds the cap 8,000"),
    (planted(IgnoresTheSeed), "determinism", "gave a different task with reset twice in a row"),
    (planted(CrashesOnNone), "actions", "step(None) raised AttributeError"),
    (planted(RaisesValidationErrorOnNone), "actions", "step(None) raised ValidationError"),
    (planted(VagueTypeError), "actions", "does not say what an action must be"),
    (planted(ChangesInfoKeys), "info", "info keys change between steps"),
    (
        planted(PaysWhatTheVerdictDoesNot),
        "rewards",
        "a wrong answer after the oracle's tool calls got reward 1.0",
    ),
    (planted(EndsInsteadOfTruncating), "rewards", "expected terminated=False, truncated=True"),
    (planted(SilencesVerifierErrors), "verifier_errors", "a silent score, not an error"),
    (with_too_small_observation_space, "api", "not within the observation space"),
]


@pytest.mark.parametrize(
    ("factory", "check", "phrase"), [pytest.param(*d, id=d[0].__name__) for d in DEFECTS]
)
def test_each_check_fails_on_the_defect_it_looks_for(factory, check, phrase):
    assert_fails(run_kit(factory), check, phrase)


def test_tokens_fails_on_a_template_that_rewrites_earlier_turns():
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    tokenizer.chat_template = THINK_STRIPPING_TEMPLATE
    report = run_kit(CALC, tokenizer=tokenizer, checks=["rewards", "tokens"])
    assert_fails(report, "tokens", "earlier turns are re-rendered differently")


# -- a sound env passes, and the report ----------------------------------------------------------------------


def test_a_sound_env_passes_every_check_and_the_report_says_what_was_covered():
    report = run_kit(CALC, tokenizer="tiny")
    assert report.ok, report.summary()
    assert [c.name for c in report.checks] == list(CHECKS)
    assert {c.status for c in report.checks} == {"passed"}
    assert "the oracle's episode replays identically" in report["determinism"].why
    assert report.timing["tool"]["n"] > 0 and report.timing["verify"]["p50"] >= 0
    assert "p50" in report["timing"].why
    assert json.loads(report.model_dump_json())["ok"] is True
    assert report.summary() == "toolgym/Calculator-v0: passed (xml)"


def test_strict_raises_one_error_listing_every_failure():
    with pytest.raises(EnvCheckError) as caught:
        run_kit(planted(PaysWhatTheVerdictDoesNot), strict=True)
    assert "rewards: FAILED" in str(caught.value) and not caught.value.report.ok


def test_without_a_tokenizer_or_a_tool_env_checks_do_not_apply():
    class PlainEnv(gym.Env):
        observation_space = AnyText(100)
        action_space = AnyText(100)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return f"task {int(self.np_random.integers(1000))}", {}

        def step(self, action):
            if not isinstance(action, str):
                raise TypeError("step takes a str")
            return "ok", 0.0, False, False, {}

    report = check_toolenv(PlainEnv, episodes=2)
    assert report.ok, report.summary()
    assert report["tokens"].status == report["rewards"].status == "n/a"
    assert "not a toolgym ToolEnv" in report["rewards"].why


def test_an_instance_is_checked_in_place_and_left_as_it_was():
    env = gym.make(CALC)
    tool, verifier = env.unwrapped.tools["calculator"], env.unwrapped.verifier
    report = check_toolenv(env, episodes=2)
    assert report.ok, report.summary()
    assert report.formats == ["xml"] and "no fresh instance" in report["determinism"].why
    assert env.unwrapped.verifier is verifier and "run" not in vars(tool)  # patches undone
    env.reset(seed=0)
    assert env.step("<calculator>6*7</calculator>")[0] == "<output>\n42\n</output>"


def test_unknown_checks_and_ids_are_refused():
    with pytest.raises(ValueError, match="unknown checks"):
        check_toolenv(CALC, checks=["vibes"])
    with pytest.raises(gym.error.Error):
        check_toolenv("toolgym/NoSuchEnv-v0")


def test_an_env_with_a_function_tool_passes_the_kit():
    @toolgym.tool
    def shout(text: str) -> str:
        """Upper-case some text.

        Args:
            text: What to shout.
        """
        if not text.strip():
            raise ValueError("nothing to shout")
        return text.upper()

    def oracle(task):
        return [ToolCall(name="shout", arguments={"text": task.data["word"]}), task.answer]

    def make():
        words = ["hello", "bye", "ok", "yes"]
        tasks = [
            {"id": w, "prompt": f"Shout '{w}'.", "answer": w.upper(), "data": {"word": w}} for w in words
        ]
        return toolgym.make_env(tasks, [shout], lambda task, answer: answer.strip() == task.answer)

    report = check_toolenv(make, oracle=oracle, episodes=4, tokenizer="tiny")
    assert report.ok, report.summary()
    assert "oracle earns the maximum" in report["rewards"].why


def test_replays_are_compared_without_what_was_timed():
    """Two plays of one episode on a busy machine differ only in how long a call waited for a sandbox slot
    (``wait_s``): the determinism check compares everything else (seen in CI: Terminal-v0's oracle episode
    'played twice differs' by that number alone)."""
    from toolgym.core.types import ToolResult
    from toolgym.testing.checks.common import without_timings

    def info(wait_s, output="x"):
        meta = {"exec_status": "ok", "wait_s": wait_s, "exit_code": 0}
        return {"tool_results": [ToolResult(name="bash", output=output, metadata=meta)], "turn": 1}

    assert without_timings(info(0.0)) == without_timings(info(0.012))
    assert without_timings(info(0.0))["tool_results"][0]["metadata"] == {"exec_status": "ok", "exit_code": 0}
    assert without_timings(info(0.0, "y")) != without_timings(info(0.0))  # what the policy sees still counts

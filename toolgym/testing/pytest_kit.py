"""The env check kit under pytest: one line in an env author's test file.

::

    # tests/test_envs.py
    from toolgym.testing import env_check_tests

    test_my_envs = env_check_tests("mypkg/*")

collects one test per env and check (``test_my_envs[mypkg/WordCount-v0-rewards]``); a failing check fails its
test with the check's problems and offending example. The kit runs once per env (the checks of one env share
its report). Arguments are env ids, ``fnmatch`` patterns over the registered ids (``"mypkg/*"``), or
factories returning an env; keyword arguments go to ``check_toolenv`` (``tokenizer="tiny"``, ``episodes=4``,
``env_kwargs={...}``). A check that does not apply to an env passes (its reason is in the report).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

from toolgym.testing.check import CHECKS, EnvCheckReport, check_toolenv


def env_check_tests(*envs: str | Callable[..., Any], **check_kwargs: Any) -> Callable[..., None]:
    """A pytest test function parametrized over ``envs`` x the kit's checks: assign it to a ``test_*``
    name in a test module."""
    import pytest

    targets = _expand(envs)
    selected = tuple(check_kwargs.get("checks") or CHECKS)
    reports: dict[str, EnvCheckReport] = {}

    @pytest.mark.parametrize("check", selected)
    @pytest.mark.parametrize("env", [pytest.param(target, id=label) for label, target in targets])
    def test_toolgym_env_check(env: Any, check: str) -> None:
        key = env if isinstance(env, str) else str(id(env))
        if key not in reports:
            reports[key] = check_toolenv(env, **check_kwargs)
        result = reports[key][check]
        if result.status == "failed":
            pytest.fail(f"{reports[key].env}: {result.describe()}", pytrace=False)

    return test_toolgym_env_check


def _expand(envs: tuple[str | Callable[..., Any], ...]) -> list[tuple[str, Any]]:
    import gymnasium as gym

    import toolgym  # noqa: F401 - registers the built-in envs and loads plugins

    if not envs:
        raise ValueError("env_check_tests needs env ids, id patterns ('mypkg/*') or env factories")
    targets: list[tuple[str, Any]] = []
    for env in envs:
        if not isinstance(env, str):
            targets.append((getattr(env, "__name__", repr(env)), env))
        elif any(ch in env for ch in "*?["):
            matched = sorted(fnmatch.filter(gym.registry, env))
            if not matched:
                raise ValueError(
                    f"no registered env matches {env!r}; is the package that registers it installed?"
                )
            targets += [(env_id, env_id) for env_id in matched]
        else:
            targets.append((env, env))
    return targets


__all__ = ["env_check_tests"]

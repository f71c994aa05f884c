"""SWE-v0's judge against tampering from inside the test process: every attack scores 0, never 1.

The package under test is imported by its tests, so what an agent writes into it runs in pytest's own
process. Each attack below is appended to the package (``calc/__init__.py``) of a SWE-bench-style row
(``toolgym.testing.swe``: ``add`` is broken, the hidden ``test_add`` checks it; 1,000 modules beside it,
the size ``benchmarks/bench_swe.py`` measures) and played as an episode
that fixes nothing: pytest's reports rewritten, pytest's and pluggy's machinery replaced, the judge's own
plugin and its signing reached for, the process ended or forked, the channel closed, unittest's result and
assertions made to pass, log lines that look like passes. Each must score 0: with no verdict error, or with
``details["tampering"]`` naming what the seal caught. The gold patch with the package's honest habits beside
it (importing pytest's modules, patching ``unittest.mock``, installing an import hook) still scores 1.

``toolgym.rewards.swe``'s module docstring says what stops each one; ``tests/sandbox/test_setups.py``
reruns this file where the filesystem wall is Landlock (a Docker-like root, and a cluster user).
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from tests.security.test_swe_hacks import append
from toolgym.core.types import ToolCall
from toolgym.envs.swe import swe_oracle
from toolgym.testing.swe import play, sample_row

#: what a stolen key buys: a whole run's records signed (ready, both tests collected, called, passed, with
#: their evidence, finished) with each candidate key, written to every descriptor, then the process ends
#: before any real test runs
FORGE = """
import hashlib as _hl, hmac as _hm, os as _os
def _forge(keys):
    _ids = ["tests/test_ops.py::test_add", "tests/test_ops.py::test_mul"]
    _recs = ['P {"ready": true, "sealed": true}', 'P {"collected": ["' + '", "'.join(_ids) + '"]}']
    for _t in _ids:
        _recs += ['P {"start": "%s"}' % _t, 'E {"ran": "%s", "returned": true}' % _t]
        for _w in ("setup", "call", "teardown"):
            _recs.append('P {"id": "%s", "when": "%s", "outcome": "passed", "xfail": false, "message": ""}'
                         % (_t, _w))
    _recs = [r.encode() for r in _recs]
    _recs.append(b'P {"finished": 0}')
    def _mac(k, r):
        if isinstance(k, tuple):  # the key's padded forms: HMAC by its definition
            return _hl.sha256(k[1] + _hl.sha256(k[0] + r).digest()).hexdigest()
        return _hm.new(k, r, _hl.sha256).hexdigest()
    _lines = b"".join(_mac(k, r).encode() + b" " + r + b"\\n" for k in keys for r in _recs)
    for _fd in range(3, 64):
        try:
            _os.write(_fd, _lines)
        except OSError:
            pass
    if keys:
        _os._exit(0)
"""

#: frames up from the package's import (pytest collecting the tests) to the runner's: what they hold
FIND = """
import sys as _s
def _frames():
    f = _s._getframe()
    while f is not None:
        yield f
        f = f.f_back
def _local(name):
    for f in _frames():
        if name in f.f_locals:
            return f.f_locals[name]
def _config():
    for f in _frames():
        for v in list(f.f_locals.values()):
            pm = getattr(v, "pluginmanager", None)
            if pm is not None:
                return v
"""

ATTACKS = {
    "TestReport.__init__ says passed": """
import _pytest.reports as r
_orig = r.TestReport.__init__
def _init(self, *a, **k):
    _orig(self, *a, **k)
    self.outcome, self.longrepr = "passed", None
r.TestReport.__init__ = _init
""",
    "TestReport.from_item_and_call says passed": """
import _pytest.reports as r
_orig = r.TestReport.from_item_and_call.__func__
def _make(cls, item, call):
    rep = _orig(cls, item, call)
    rep.outcome, rep.longrepr = "passed", None
    return rep
r.TestReport.from_item_and_call = classmethod(_make)
""",
    "CallInfo.from_call drops the exception": """
import _pytest.runner as r
_orig = r.CallInfo.from_call.__func__
def _call(cls, func, when, reraise=None):
    info = _orig(cls, func, when, reraise)
    info.excinfo = None
    return info
r.CallInfo.from_call = classmethod(_call)
""",
    "_pytest.runner.call_and_report rewritten": """
import _pytest.runner as r
_orig = r.call_and_report
def _car(item, when, log=True, **kw):
    rep = _orig(item, when, log=False, **kw)
    rep.outcome, rep.longrepr = "passed", None
    if log:
        item.ihook.pytest_runtest_logreport(report=rep)
    return rep
r.call_and_report = _car
""",
    "runtestprotocol reports passes without running": """
import _pytest.runner as r
from _pytest.reports import TestReport
def _protocol(item, log=True, nextitem=None):
    reports = [TestReport(item.nodeid, item.location, {}, "passed", None, w) for w in
               ("setup", "call", "teardown")]
    for rep in reports:
        item.ihook.pytest_runtest_logreport(report=rep)
    return reports
r.runtestprotocol = _protocol
""",
    "pluggy's hook calls rewritten on the plugin manager": FIND
    + """
_cfg = _config()
_pm = _cfg.pluginmanager
_inner = _pm._inner_hookexec
def _exec(name, impls, kwargs, first):
    if name == "pytest_runtest_logreport":
        kwargs["report"].outcome, kwargs["report"].longrepr = "passed", None
    return _inner(name, impls, kwargs, first)
_pm._inner_hookexec = _exec
""",
    "the judge's plugin found by gc and its hooks replaced": """
import gc
for _o in gc.get_objects():
    if type(_o).__name__ == "_Reporter":
        type(_o).pytest_runtest_logreport = lambda self, report: None
""",
    "the judge's plugin unregistered": FIND
    + """
_pm = _config().pluginmanager
for _p in list(_pm.get_plugins()):
    if type(_p).__name__ == "_Reporter":
        _pm.unregister(_p)
""",
    "the key read back through gc": FORGE
    + """
import gc
_forge([_v for _o in gc.get_objects() for _v in (getattr(_o, "__defaults__", None) or ())
        if isinstance(_v, bytes) and len(_v) == 32])
""",
    "a key looked for downward from every module and frame (gc.get_referents)": FORGE
    + """
import gc, sys
_seen, _todo, _keys = set(), [*sys.modules.values(), sys._getframe()], []
while _todo and len(_seen) < 400000:
    _o = _todo.pop()
    if id(_o) in _seen:
        continue
    _seen.add(id(_o))
    if isinstance(_o, bytes) and len(_o) == 32:
        _keys.append(_o)
    _todo.extend(gc.get_referents(_o))
_forge(_keys)
""",
    "gc's own get_objects called around the judge's": FORGE
    + """
import gc
_real = next(d for d in gc.get_objects.__defaults__ if getattr(d, "__name__", "") == "get_objects")
_forge([_v for _o in _real() for _v in (getattr(_o, "__defaults__", None) or ())
        if isinstance(_v, bytes) and len(_v) == 32])
""",
    "the key looked for among gc's referrers of the runner's code": FORGE
    + """
import gc, sys
_main = sys.modules["__main__"]
_codes = [c for f in vars(_main).values() if callable(f) and hasattr(f, "__code__")
          for c in f.__code__.co_consts if type(c) is type(f.__code__)]
_forge([_v for _c in _codes for _o in gc.get_referrers(_c) for _v in (getattr(_o, "__defaults__", None) or ())
        if isinstance(_v, bytes) and len(_v) == 32])
""",
    "a key looked for in the runner's frames": FIND
    + FORGE
    + """
_keys = []
for _f in _frames():
    _vals = list(_f.f_locals.values())
    _keys += [_v for _v in _vals + [c for v in _vals if isinstance(v, list) for c in v]
              if isinstance(_v, bytes) and len(_v) == 32]
_forge(_keys)
""",
    "hmac.HMAC replaced to catch the key as the runner signs": FORGE
    + """
import hmac as _h
_Real = _h.HMAC
class _Catch(_Real):
    def __init__(self, key, msg=None, digestmod=""):
        if isinstance(key, bytes) and len(key) == 32:
            _forge([key])
        super().__init__(key, msg, digestmod)
_h.HMAC = _Catch
""",
    "json's encoder replaced to reach the signing frame": FORGE
    + """
import json as _j, sys as _s
_enc = _j._default_encoder
class _Reach:
    def encode(self, obj):
        f = _s._getframe(1)
        while f is not None:
            keys = [v for v in f.f_locals.values() if isinstance(v, bytes) and len(v) == 32]
            if keys:
                _forge(keys)
            f = f.f_back
        return _enc.encode(obj)
_j._default_encoder = _Reach()
""",
    "a signal handler that looks up the frame the hook signs in": FORGE
    + """
import signal as _sg, sys as _s
def _look(signum, frame):
    f = _s._getframe(1)
    while f is not None:
        if "_inner" in f.f_locals and "_outer" in f.f_locals:
            _forge([(f.f_locals["_inner"], f.f_locals["_outer"])])
        f = f.f_back
_sg.signal(_sg.SIGPROF, _look)
_sg.setitimer(_sg.ITIMER_PROF, 0.001, 0.001)
_s.audit("toolgym.judge.unseen", list(range(3000000)))  # keeps the hook busy filtering
_sg.setitimer(_sg.ITIMER_PROF, 0)
""",
    "forged records written to every descriptor": """
import os
_lines = b"".join(
    b"0" * 64 + b" " + k + b" " + d + b"\\n" for k, d in (
        (b"P", b'{"id": "tests/test_ops.py::test_add", "when": "call", "outcome": "passed", "xfail": false}'),
        (b"E", b'{"ran": "tests/test_ops.py::test_add", "returned": true}')))
for _fd in range(3, 64):
    try:
        os.write(_fd, _lines)
    except OSError:
        pass
""",
    "records replayed from an earlier run and from this one": """
import atexit, hashlib, hmac, os
_earlier = os.urandom(32)  # an earlier run's key: each judge run has its own
_seen = []
_write = os.write
def _capture(fd, data):  # this run's own lines, where the runner writes them through os.write
    if fd > 2 and b'"passed"' in bytes(data):
        _seen.append(bytes(data))
        _replay()
    return _write(fd, data)
def _replay():
    lines = list(_seen)
    for k, d in (
        (b"P", b'{"id": "tests/test_ops.py::test_add", "when": "call", "outcome": "passed", "xfail": false}'),
        (b"E", b'{"ran": "tests/test_ops.py::test_add", "returned": true}')):
        sig = hmac.new(_earlier, k + b" " + d, hashlib.sha256).hexdigest().encode()
        lines.append(sig + b" " + k + b" " + d + b"\\n")
    for _fd in range(3, 64):
        for _line in lines:
            try:
                _write(_fd, _line)
            except OSError:
                pass
os.write = _capture
atexit.register(_replay)
""",
    "the runner's own send and wrap called with a false story": FIND
    + """
import atexit
_send, _wrap = _local("send"), _local("wrap")
_send({"id": "tests/test_ops.py::test_add", "when": "call", "outcome": "passed", "xfail": False,
       "message": ""})
_wrap(lambda: None, "tests/test_ops.py::test_add")()
atexit.register(lambda: _wrap(lambda: None, "tests/test_ops.py::test_add")())
""",
    "the evidence event raised by the package itself": """
import sys
sys.audit("toolgym.judge.ran", True)
""",
    "the wrap of a passing test claimed for the failing one": FIND
    + """
import sys, _pytest.runner as r
_wrap = _local("wrap")
_orig = r.call_and_report
def _car(item, when, log=True, **kw):
    if when == "call" and item.name == "test_add":
        _mod = [m for n, m in list(sys.modules.items()) if n.endswith("test_ops")][0]
        _wrap(_mod.test_mul, item.nodeid)()
    return _orig(item, when, log, **kw)
r.call_and_report = _car
""",
    "os._exit(0) when the failing test starts": """
import os, _pytest.runner as r
_orig = r.call_and_report
def _car(item, when, log=True, **kw):
    if item.name == "test_add":
        os._exit(0)
    return _orig(item, when, log, **kw)
r.call_and_report = _car
""",
    "an atexit handler that ends the process with 0": """
import atexit, os
atexit.register(lambda: os._exit(0))
""",
    "the time limit swallowed and the test hung": """
import faulthandler, signal, time, _pytest.runner as r
for _s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT):
    signal.signal(_s, signal.SIG_IGN)
_orig = r.call_and_report
def _car(item, when, log=True, **kw):
    if item.name == "test_add":
        faulthandler.cancel_dump_traceback_later()
        time.sleep(10**6)
    return _orig(item, when, log, **kw)
r.call_and_report = _car
""",
    "a fork that outlives the runner and writes late": """
import os, time
if os.fork() == 0:
    os.setsid()
    time.sleep(3)
    for _fd in range(3, 64):
        try:
            os.write(_fd, b"0" * 64 + b' E {"ran": "tests/test_ops.py::test_add", "returned": true}\\n')
        except OSError:
            pass
    os._exit(0)
""",
    "the channel closed": """
import os
for _fd in range(3, 256):
    try:
        os.close(_fd)
    except OSError:
        pass
""",
    "the channel flooded": """
import os
for _fd in range(3, 64):
    try:
        os.write(_fd, b"x" * (1 << 20))
    except OSError:
        pass
""",
    "the test function replaced by a no-op after import": FIND
    + """
import _pytest.runner as r
_orig = r.call_and_report
def _car(item, when, log=True, **kw):
    if when == "call" and item.name == "test_add":
        item.obj = lambda: None
    return _orig(item, when, log, **kw)
r.call_and_report = _car
""",
    "a trace function installed to rewrite frames": """
import sys
sys.settrace(lambda *a: None)
sys.settrace(None)
""",
    "ctypes reaching the interpreter": """
import ctypes
ctypes.pythonapi.PyFrame_LocalsToFast
""",
    "raw memory read by the package with ctypes.string_at": """
import ctypes
_b = b"the key is near"
ctypes.string_at(id(_b), 48)
""",
    "ctypes.string_at handed to an installed package's function to call": """
import ctypes, pytest
_b = b"the key is near"
try:
    pytest.raises(ZeroDivisionError, ctypes.string_at, id(_b), 48)
except BaseException:
    pass
""",
    "a new audit hook to watch the judge": """
import sys
sys.addaudithook(lambda event, args: None)
import _pytest.reports as r
_orig = r.TestReport.__init__
def _init(self, *a, **k):
    _orig(self, *a, **k)
    self.outcome, self.longrepr = "passed", None
r.TestReport.__init__ = _init
""",
    "log lines a parser would read as passes": """
print("tests/test_ops.py::test_add PASSED")
print("test_add (tests.test_ops.OpsTest) ... ok")
print("[OK] test_add")
print("2 passed in 0.01s")
""",
}

#: attacks on unittest's side, played on the unittest-style row
UNITTEST_ATTACKS = {
    "TestCase.assertEqual made a no-op": """
import unittest
unittest.TestCase.assertEqual = lambda self, *a, **k: None
""",
    "TestResult.addFailure made addSuccess": """
import unittest
unittest.TestResult.addFailure = unittest.TestResult.addSuccess
unittest.TestResult.addError = unittest.TestResult.addSuccess
""",
    "pytest's unittest result made to swallow failures": """
import _pytest.unittest as u
u.TestCaseFunction.addFailure = lambda self, testcase, rawexcinfo: None
u.TestCaseFunction.addError = lambda self, testcase, rawexcinfo: None
""",
    "TestCase.run made to skip the test": """
import unittest
unittest.TestCase.run = lambda self, result=None: None
""",
    "log lines a parser would read as passes": ATTACKS["log lines a parser would read as passes"],
}

HONEST = {
    "a package that imports pytest's modules": "import pytest, _pytest.runner, _pytest.reports\n",
    "a package that patches unittest.mock for its tests": (
        "import unittest.mock\nunittest.mock.Mock.calc_marker = True\n"
        "unittest.mock.patch.TEST_PREFIX = 'test'\n"
    ),
    "a package that walks its objects with gc.get_referents (pandas' chained assignment check)": (
        "import gc\n_graph = gc.get_referents({'a': [1, 2]}, object())\n"
    ),
    "a package whose tests look for leaks with gc.get_objects and gc.get_referrers (pytest's own)": (
        "import gc\n_objects = [o for o in gc.get_objects() if type(o).__name__ == 'TestCase']\n"
        "_referrers = gc.get_referrers(gc)\n"
    ),
    "a package that looks up Python's capsule and bytes functions with ctypes (dill, fsspec)": (
        "import ctypes\n_new = ctypes.pythonapi.PyCapsule_New\n_get = ctypes.pythonapi.PyCapsule_GetPointer\n"
        "_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize\n_raw = ctypes.pythonapi.PyBytes_AsString\n"
    ),
    "a package that installs an import hook": (
        "import sys\nclass _Finder:\n    def find_spec(self, name, path=None, target=None):\n"
        "        return None\nsys.meta_path.insert(0, _Finder())\n"
    ),
}


def _env(root, style):
    (root / "rows.jsonl").write_text(json.dumps(sample_row(root, scale=1000, style=style)) + "\n")
    return gym.make(
        "toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root), validate=False, test_timeout=4.0
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = _env(tmp_path_factory.mktemp("swe-in-process"), "pytest")
    yield e
    e.close()


@pytest.fixture(scope="module")
def unittest_env(tmp_path_factory):
    e = _env(tmp_path_factory.mktemp("swe-in-process-unittest"), "unittest")
    yield e
    e.close()


def attack(code: str) -> ToolCall:
    return ToolCall(name="bash", arguments={"command": append("calc/__init__.py", code)})


def _scores_zero(reward, verdict):
    return reward == 0.0 and not verdict.passed and verdict.error is None


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_tampering_from_inside_the_test_process_scores_zero(env, name):
    reward, verdict = play(env, [attack(ATTACKS[name]), "done"])
    assert _scores_zero(reward, verdict), (name, verdict)


@pytest.mark.parametrize("name", sorted(UNITTEST_ATTACKS))
def test_tampering_with_unittest_scores_zero(unittest_env, name):
    reward, verdict = play(unittest_env, [attack(UNITTEST_ATTACKS[name]), "done"])
    assert _scores_zero(reward, verdict), (name, verdict)


@pytest.mark.parametrize(
    "name",
    [
        "TestReport.__init__ says passed",
        "_pytest.runner.call_and_report rewritten",
        "gc's own get_objects called around the judge's",
        "the evidence event raised by the package itself",
        "a trace function installed to rewrite frames",
        "ctypes reaching the interpreter",
        "raw memory read by the package with ctypes.string_at",
        "ctypes.string_at handed to an installed package's function to call",
    ],
)
def test_the_seal_names_what_it_caught(env, name):
    reward, verdict = play(env, [attack(ATTACKS[name]), "done"])
    assert verdict.details["tampering"] and reward == 0.0, verdict
    # the outcomes up to where the run stopped are still there, in the usual keys
    assert verdict.details["fail_to_pass"]["tests/test_ops.py::test_add"] != "passed", verdict


@pytest.mark.parametrize("name", sorted(HONEST))
def test_an_honest_fix_beside_the_package_s_habits_still_scores_one(env, name):
    env.reset(seed=0)
    fix = list(swe_oracle(env.unwrapped.task))[:-1]
    reward, verdict = play(env, [*fix, attack(HONEST[name]), "done"])
    assert (reward, verdict.error, verdict.details.get("tampering")) == (1.0, None, None), verdict


#: numba's compiler reads LLVM's buffers with ctypes.string_at and its import reads _Py_HashSecret with
#: in_dll: an installed package's own raw-memory calls, which the seal lets run (xarray's sparse, numbagg)
NUMBA = "import numba\n@numba.njit\ndef _twice(x):\n    return 2 * x\n_twice(3)\n"


def test_an_honest_fix_beside_a_package_that_compiles_with_numba_still_scores_one(env):
    import numba  # noqa: F401 - (vLLM's CPU extra brings it: a core-only run skips this, naming the extra)

    env.reset(seed=0)
    fix = list(swe_oracle(env.unwrapped.task))[:-1]
    reward, verdict = play(env, [*fix, attack(NUMBA), "done"])
    assert (reward, verdict.error, verdict.details.get("tampering")) == (1.0, None, None), verdict


def test_an_honest_unittest_fix_scores_one(unittest_env):
    unittest_env.reset(seed=0)
    fix = list(swe_oracle(unittest_env.unwrapped.task))[:-1]
    reward, verdict = play(
        unittest_env, [*fix, attack(HONEST["a package that installs an import hook"]), "done"]
    )
    assert (reward, verdict.error) == (1.0, None), verdict

"""SWE-v0's judge's driver program: what runs in the judge's fresh sandbox child (``JUDGE_DRIVER``) and in
the test process it starts (``RUNNER``).

``toolgym.rewards.swe`` (the trusted side: what to apply, which tests, reading the verdict) sends it after
``PROCESS_DRIVER`` (``toolgym.sandbox.driver``: the guard, the reaper, the archive unpack) and calls
``_tg_judge``: unpack the base commit, apply the agent's changes the trusted side kept (the protected paths
left out), put the task's tests back, run pytest in a ``python -I`` subprocess under an address-space limit
(``_tg_cap_memory``), and read back the records the runner signed (``_tg_pytest``: pytest imported before
the repository is on ``sys.path``, each record signed with a key it reads from stdin before any repository
code runs). The module
docstring of ``toolgym.rewards.swe`` says what each step defeats.
"""

# Runs in the judge's fresh child after PROCESS_DRIVER: builds the tree, runs the runner, reads its records.
JUDGE_DRIVER = r"""
def _tg_tree(ws, cfg):
    # the judged tree: the base commit unpacked, the agent's changes (links last, so none is written
    # through; one that cannot be made, a file under a path its changes made a link or a link out of the
    # tree, is left out and listed, never a judge failure), then the task's test files over whatever is there
    import shutil
    _tg_unpack("testbed.tar", ws)
    real_ws = _os.path.realpath(ws)
    def put(rel, kind, mode, data):
        path = _os.path.join(ws, rel)
        parent = _os.path.realpath(_os.path.dirname(path))
        if parent != real_ws and not parent.startswith(real_ws + "/"):
            raise OSError(f"{rel} lies behind a link out of the tree")
        if _os.path.islink(path) or _os.path.isfile(path):
            _os.remove(path)
        elif _os.path.isdir(path):
            shutil.rmtree(path)
        if kind == "deleted":
            return
        _os.makedirs(_os.path.dirname(path), exist_ok=True)
        if kind == "link":
            _os.symlink(data, path)
            return
        with open(path, "wb") as fh:
            fh.write(_b64.b64decode(data))
        _os.chmod(path, mode & 0o777)
    unapplied = []
    for rel, kind, mode, data in sorted(cfg["changes"], key=lambda e: e[1] == "link"):
        try:
            put(rel, kind, mode, data)
        except OSError as exc:
            unapplied.append(f"{rel}: {exc.strerror or exc}")
    for rel, kind, mode, data in cfg["tests"]:
        put(rel, kind, mode, data)
    return unapplied

def _tg_build(ws, shown, python):
    # a rebuild of the compiled parts in a child of its own (the build runs the repository's build script
    # and compilers on the agent's sources: nothing of it shares the judge's child, which takes back only
    # the extension modules it made, as data)
    _tg_guard()
    with open("build.json") as fh:
        cfg = _json.load(fh)
    _os.remove("build.json")
    _tg_tree(ws, cfg)
    shown = _os.path.abspath(shown)
    def built():
        found = {}
        for root, dirs, names in _os.walk(ws):
            dirs[:] = [d for d in dirs if d not in (".git", "build")]
            for name in names:
                if name.endswith((".so", ".pyd")):
                    path = _os.path.join(root, name)
                    st = _os.lstat(path)
                    found[_os.path.relpath(path, ws)] = (st.st_mtime_ns, st.st_size)
        return found
    before = built()
    env = {k: v for k, v in _os.environ.items() if not k.startswith("PYTHON")}
    env.update(PWD=shown, TOOLGYM_TESTBED=shown)
    argv = [python if w == "python" else w for w in cfg["rebuild"]]
    try:
        done = _sp.run(argv, cwd=shown, env=env, stdin=_sp.DEVNULL, stdout=_sp.PIPE, stderr=_sp.STDOUT,
                       timeout=cfg["timeout"])
        code, out = done.returncode, done.stdout.decode("utf-8", "replace")[-3000:]
    except (OSError, _sp.SubprocessError) as exc:
        code, out = -1, str(exc)
    _tg_kill_all()
    files = []
    for rel, stamp in sorted(built().items()):
        if before.get(rel) != stamp:
            with open(_os.path.join(ws, rel), "rb") as fh:
                files.append([rel, "file", 0o755, _b64.b64encode(fh.read()).decode()])
    print(_json.dumps({"exit": code, "out": out, "files": files}))

def _tg_judge(ws, shown, python, runner):
    import hashlib, hmac, sys as _sys
    _tg_guard()
    with open("judge.json") as fh:
        cfg = _json.load(fh)
    _os.remove("judge.json")
    unapplied = _tg_tree(ws, cfg)
    key = _os.urandom(32)
    rep_r, rep_w = _os.pipe()
    out_r, out_w = _os.pipe()
    shown = _os.path.abspath(shown)  # (without the view: the tree in this child's own directory)
    env = {k: v for k, v in _os.environ.items() if not k.startswith("PYTHON")}
    env.update(PWD=shown, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", TOOLGYM_TESTBED=shown)
    run = {"fd": rep_w, "root": shown, "ids": cfg["ids"], "files": cfg["files"],
           "test_timeout": cfg["test_timeout"], "trace": cfg.get("trace", False),
           "id_rule": cfg.get("id_rule", "exact")}
    if python == _sys.executable and "pytest" in _sys.modules:
        # this interpreter (a fork of a server that imported pytest and its plugins) forks the test process:
        # what `python -I` with pytest imported first gives, without starting an interpreter
        exec(runner, globals())
        _sys.stdout.flush()
        _sys.stderr.flush()
        pid = _os.fork()
        if pid == 0:
            code = 3
            try:
                _os.setsid()
                null = _os.open(_os.devnull, _os.O_RDONLY)
                _os.dup2(null, 0)
                _os.dup2(out_w, 1)
                _os.dup2(out_w, 2)
                for fd in (null, out_r, out_w, rep_r):
                    _os.close(fd)
                _os.chdir(shown)
                _os.environ.clear()
                _os.environ.update(env)
                _tg_cap_memory(cfg["memory"])
                code = _tg_pytest(run, key)
            finally:
                try:
                    _sys.stdout.flush()
                    _sys.stderr.flush()
                finally:
                    _os._exit(code)
        _os.close(out_w)
        wait = lambda: _os.waitstatus_to_exitcode(_os.waitpid(pid, 0)[1])
    else:  # another interpreter: `python -I -c` the runner, its key and settings on its stdin
        proc = _sp.Popen([python, "-I", "-c", runner + _RUNNER_MAIN], stdin=_sp.PIPE, stdout=out_w,
                         stderr=_sp.STDOUT, cwd=shown, env=env, pass_fds=(rep_w,), start_new_session=True,
                         preexec_fn=lambda: _tg_cap_memory(cfg["memory"]))
        _os.close(out_w)
        try:
            proc.stdin.write((_json.dumps(dict(run, key=key.hex())) + "\n").encode())
            proc.stdin.close()
        except BrokenPipeError:  # it exited before reading its settings: no "ready" record says why
            pass
        wait = proc.wait
    _os.close(rep_w)
    out, records, bad, buf = bytearray(), [], 0, b""
    fds = [out_r, rep_r]
    while fds:
        for fd in _select.select(fds, [], [])[0]:
            chunk = _os.read(fd, 65536)
            if not chunk:
                fds.remove(fd)
            elif fd == rep_r:
                if len(buf) < (64 << 20):  # (records past 64 MiB are junk someone wrote into the pipe)
                    buf += chunk
            else:
                out += chunk
                del out[: max(len(out) - 8000, 0)]
    code = wait()
    _tg_kill_all()
    for line in buf.split(b"\n"):
        sig, _, body = line.partition(b" ")
        if not line:
            continue
        if hmac.compare_digest(sig, hmac.new(key, body, hashlib.sha256).hexdigest().encode()):
            records.append(_json.loads(body))
        else:
            bad += 1
    print(_json.dumps({"records": records, "bad": bad, "exit": code,
                       "out": out.decode("utf-8", "replace"),
                       "unapplied": unapplied}))

def _tg_cap_memory(limit):
    # the test process's address space below the run's memory limit: code under test that takes it all
    # fails its tests with MemoryError, instead of the whole run (and its verdict) being killed
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

_RUNNER_MAIN = '''
import json as _j, os as _o, sys as _s
_cfg = _j.loads(_s.stdin.readline())
_n = _o.open(_o.devnull, _o.O_RDONLY)
_o.dup2(_n, 0)
_s.exit(_tg_pytest(_cfg, bytes.fromhex(_cfg.pop("key"))))
'''
"""

# The test process: pytest imported before the repository is on sys.path, records signed with ``key``. Run as
# ``python -I -c`` (another interpreter) or called in a process forked from a server that imported pytest.
RUNNER = r"""
def _tg_pytest(cfg, key):
    import faulthandler, hashlib, hmac, json, os, sys
    def _send(record, _key=key, _fd=cfg["fd"], _dumps=json.dumps, _new=hmac.new, _sha=hashlib.sha256,
              _write=os.write):
        body = _dumps(record).encode()
        _write(_fd, _new(_key, body, _sha).hexdigest().encode() + b" " + body + b"\n")
    del key
    import pytest, _pytest.main, _pytest.runner, _pytest.python, _pytest.terminal, _pytest.skipping
    wanted = None if cfg["ids"] is None else frozenset(cfg["ids"])
    rule = cfg.get("id_rule", "exact")
    def listed(nodeid):  # the forms a dataset may list this test under (toolgym.rewards.swe.listed_forms)
        forms = {nodeid}
        if rule != "exact":
            cut = nodeid.split()[0] if nodeid.split() else nodeid
            forms.add(cut)
            if rule == "pytest_options" and "[" in cut and cut.endswith("]"):
                main, option = cut[:-1].split("[", 1)
                if option.startswith("/") and not option.startswith("//") and "*" not in option:
                    forms.add(main + "[/" + option.split("/")[-1] + "]")
        return forms
    limit = float(cfg["test_timeout"])
    root = os.path.realpath(cfg["root"]) + os.sep
    trace = cfg["trace"]
    class _Reporter:
        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, session, config, items):
            keep = [i for i in items if wanted is None or listed(i.nodeid) & wanted]
            drop = [i for i in items if wanted is not None and not listed(i.nodeid) & wanted]
            items[:] = keep
            if drop:
                config.hook.pytest_deselected(items=drop)
            _send({"collected": [i.nodeid for i in keep]})
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            _send({"start": item.nodeid})
            seen = set()
            if trace:  # the miner's coverage: which of the repository's functions each test calls
                def profile(frame, event, arg, seen=seen):
                    if event == "call":
                        seen.add(frame.f_code)
                sys.setprofile(profile)
            faulthandler.dump_traceback_later(limit, exit=True)
            yield
            faulthandler.cancel_dump_traceback_later()
            if trace:
                sys.setprofile(None)
                found = set()
                for code in seen:
                    path = os.path.realpath(code.co_filename)
                    if path.startswith(root):
                        found.add((path[len(root):], getattr(code, "co_qualname", code.co_name)))
                _send({"covered": item.nodeid, "functions": sorted(found)})
        def pytest_runtest_logreport(self, report):
            crash = getattr(report.longrepr, "reprcrash", None)
            _send({"id": report.nodeid, "when": report.when, "outcome": report.outcome,
                   "xfail": bool(getattr(report, "wasxfail", None) is not None and report.skipped),
                   "message": getattr(crash, "message", "")[:500] if report.failed else ""})
        def pytest_sessionfinish(self, session, exitstatus):
            _send({"finished": int(exitstatus)})
    _send({"ready": True})
    sys.path.insert(0, cfg["root"])  # as `python -m pytest` from the repository's root
    # (plugins imported before pytest started cannot have their asserts rewritten: pytest says so, needlessly)
    quiet = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    args = ["-q", "-p", "no:cacheprovider", "--continue-on-collection-errors", *quiet, *cfg["files"]]
    return int(pytest.main(args, plugins=[_Reporter()]))
"""

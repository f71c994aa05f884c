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
    box = [_os.urandom(32)]  # (popped in a forked test process: no frame of it holds the key)
    key = box[0]
    rep_r, rep_w = _os.pipe()
    out_r, out_w = _os.pipe()
    shown = _os.path.abspath(shown)  # (without the view: the tree in this child's own directory)
    env = {k: v for k, v in _os.environ.items() if not k.startswith("PYTHON")}
    env.update(PWD=shown, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", TOOLGYM_TESTBED=shown)
    if not cfg.get("plugin_autoload", True):  # (a suite that needs no installed plugin: run_tests says)
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    run = {"fd": rep_w, "root": shown, "ids": cfg["ids"], "files": cfg["files"],
           "changed": sorted({e[0] for e in cfg.get("changes", ())}),
           "test_timeout": cfg["test_timeout"], "trace": cfg.get("trace", False),
           "id_rule": cfg.get("id_rule", "exact"), "runner": cfg.get("runner"),
           "network": cfg.get("network", True)}
    if python == _sys.executable and "pytest" in _sys.modules:
        # this interpreter (a fork of a server that imported pytest and its plugins) forks the test process:
        # what `python -I` with pytest imported first gives, without starting an interpreter
        exec(runner, globals())
        _sys.stdout.flush()
        _sys.stderr.flush()
        del key
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
                code = _tg_tests(run, box.pop())
            finally:
                try:
                    _sys.stdout.flush()
                    _sys.stderr.flush()
                finally:
                    _os._exit(code)
        key = box.pop()
        _os.close(out_w)
        kill = lambda: _os.killpg(pid, 9)
        status = {}
        def poll(_pid=pid, _status=status):
            if "code" not in _status:
                done, st = _os.waitpid(_pid, _os.WNOHANG)
                if done == _pid:
                    _status["code"] = _os.waitstatus_to_exitcode(st)
            return "code" in _status
        wait = lambda: status["code"] if poll() else _os.waitstatus_to_exitcode(_os.waitpid(pid, 0)[1])
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
        poll = lambda: proc.poll() is not None
        kill = lambda: _os.killpg(proc.pid, 9)
        wait = proc.wait
    _os.close(rep_w)
    # Records count while the test process runs: what a process it left behind writes later is never read.
    # The time limit is kept here too: a test still running past its limit (the runner's own watchdog
    # undone from inside) has the test process killed, and the test in progress is "timed out".
    import time as _time
    out, records, evidence, bad, buf = bytearray(), [], [], 0, b""
    limit = float(cfg["test_timeout"]) + 15.0
    state = {"since": None, "running": None, "killed": False}
    def take(line):
        nonlocal bad
        sig, _, data = line.partition(b" ")
        kind, _, body = data.partition(b" ")
        if not hmac.compare_digest(sig, hmac.new(key, data, hashlib.sha256).hexdigest().encode()):
            bad += 1
            return
        record = _json.loads(body)
        (records if kind == b"P" else evidence).append(record)
        if kind == b"P" and "start" in record:
            state["since"], state["running"] = _time.monotonic(), record["start"]
        elif kind == b"P" and record.get("when") == "teardown" and record.get("id") == state["running"]:
            state["since"] = None
    def read(fd):
        nonlocal buf, out
        chunk = _os.read(fd, 65536)
        if fd == rep_r and chunk and len(buf) < (64 << 20):  # (past 64 MiB: junk written into the pipe)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line:
                    take(line)
        elif chunk:
            out += chunk
            del out[: max(len(out) - 8000, 0)]
        return chunk
    fds = [out_r, rep_r]
    while fds and not poll():
        for fd in _select.select(fds, [], [], 0.5)[0]:
            if not read(fd):
                fds.remove(fd)
        since = state["since"]
        if since is not None and not state["killed"] and _time.monotonic() - since > limit:
            state["killed"] = True
            try:
                kill()
            except OSError:
                pass
    left = 1 << 20  # what the test process wrote before it ended is in the pipes: read that much, no more
    while fds and left > 0:
        ready = _select.select(fds, [], [], 0)[0]
        if not ready:
            break
        for fd in ready:
            chunk = read(fd)
            left -= len(chunk)
            if not chunk:
                fds.remove(fd)
    killed = state["killed"]
    code = wait()
    _tg_kill_all()
    print(_json.dumps({"records": records, "evidence": evidence, "bad": bad, "exit": code,
                       "killed": killed, "out": out.decode("utf-8", "replace"),
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
_s.exit(_tg_tests(_cfg, bytes.fromhex(_cfg.pop("key"))))
'''
"""

# The test process: pytest imported before the repository is on sys.path, the seal (``_tg_seal``: the audit
# hook that holds the key and writes every record) installed before any of its code can run. Run as
# ``python -I -c`` (another interpreter) or called in a process forked from a server that imported pytest.
RUNNER = r"""
def _tg_expand(root, files):
    # the listed files, a directory's (a path ending in "/") as every .py file under it
    import os
    out = []
    for rel in files:
        if not rel.endswith("/"):
            out.append(rel)
            continue
        for where, dirs, names in os.walk(os.path.join(root, rel)):
            dirs.sort()
            for name in sorted(names):
                if name.endswith(".py"):
                    out.append(os.path.relpath(os.path.join(where, name), root))
    return out

def _tg_bases(root, files, changed):
    # the files whose test classes the listed files' classes inherit from (astropy's TestMetaTable from
    # astropy/utils/tests/test_metadata.py's MetaBaseTest, imported by name), read before the repository can
    # run: their test functions are the listed tests' own. A base counts only where the file it is imported
    # from defines it with test methods of its own (a package's classes, sympy's Basic or Django's
    # models.Model, and a package's __init__ that re-exports a name, hold no test: sealing them would only
    # cost each run their compiles), and only where the change leaves the file as it was (the base commit's
    # or the test patch's): a base class the change rewrote is the change's, not the test's.
    # {listed file: (it, and each file its classes' bases come from, up to three levels)}
    import ast, os
    changed = frozenset(changed)
    parsed = {}
    def tree_of(rel):
        if rel not in parsed:
            try:
                with open(os.path.join(root, rel), "rb") as fh:
                    parsed[rel] = ast.parse(fh.read(), filename=rel)
            except (OSError, SyntaxError, ValueError):
                parsed[rel] = None
        return parsed[rel]
    def module_file(module):
        for base in (module.replace(".", "/"), "src/" + module.replace(".", "/")):
            for rel in (base + ".py", base + "/__init__.py"):
                if os.path.isfile(os.path.join(root, rel)):
                    return rel
        return None
    def holds_tests(rel, cls):
        # `rel` defines class `cls` at its top level, with a test method (pytest's and unittest's prefix)
        tree = tree_of(rel)
        return tree is not None and any(
            isinstance(node, ast.ClassDef) and node.name == cls and any(
                isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name.startswith("test")
                for f in node.body)
            for node in tree.body)
    def sources(rel):
        # the files the classes of `rel` take their bases from
        tree = tree_of(rel)
        if tree is None:
            return set()
        package = os.path.dirname(rel).replace("/", ".")
        names = {}  # a name bound by an import: the module it names or is taken from
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".") if package else []
                    parts = parts[:len(parts) - node.level + 1] if node.level <= len(parts) + 1 else []
                    module = ".".join(parts + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    names[alias.asname or alias.name] = (module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    names[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0], None)
        found = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                chain = []
                while isinstance(base, ast.Attribute):
                    chain.insert(0, base.attr)
                    base = base.value
                if not isinstance(base, ast.Name) or base.id not in names:
                    continue
                module, name = names[base.id]
                if name is not None:  # from M import X: X is a class of M, or a module M.X
                    target = module_file(module + "." + name) if chain else None
                    target = target or module_file(module)
                else:  # import M (as m): m.a.X is a class of M.a
                    target = module_file(".".join([module] + chain[:-1]))
                cls = chain[-1] if chain else name
                if (target is not None and target != rel and target.endswith(".py") and target not in changed
                        and holds_tests(target, cls)):
                    found.add(target)
        return found
    out = {}
    for rel in _tg_expand(root, files):
        if not rel.endswith(".py"):
            continue
        seen, todo = [rel], [rel]
        for _ in range(3):
            todo = [t for f in todo for t in sorted(sources(f)) if t not in seen]
            seen.extend(todo)
        out[rel] = tuple(seen)
    return out

def _tg_pristine(root, files):
    # the listed test files' code as their bytes compile, read before any code of the repository can run:
    # as an import makes it, and as pytest's assertion rewriter makes it (with and without the
    # assertion-pass hook): {each path the file may be imported under: (code objects)}
    import ast, os
    try:
        from _pytest.assertion.rewrite import rewrite_asserts
    except ImportError:
        rewrite_asserts = None
    try:
        from py.path import local
    except ImportError:
        local = None
    class PassHook:
        def getini(self, name):
            return name == "enable_assertion_pass_hook"
    out = {}
    for rel in _tg_expand(root, files):
        if not rel.endswith(".py") or not os.path.isfile(os.path.join(root, rel)):
            continue
        with open(os.path.join(root, rel), "rb") as fh:
            source = fh.read()
        # compiled under each path the file may be imported under: pytest 3.8 to 5.x's rewriter writes the
        # module's path into the code of every assert (its warning for `assert None`)
        for path in {os.path.normpath(os.path.join(base, rel)) for base in (root, os.path.realpath(root),
                                                                             os.getcwd())}:
            try:
                variants = [compile(source, path, "exec", dont_inherit=True)]
            except (SyntaxError, ValueError):
                break
            # (the path as a str, and as the py.path.local that pytest 3.8 to 5.1 hand it, whose repr it
            # writes; pytest < 5 takes no source argument)
            for config in ((None, PassHook()) if rewrite_asserts else ()):
                for where in (path, *((local(path),) if local else ())):
                    for args in ((source, where, config), (where, config)):
                        try:
                            tree = ast.parse(source, filename=path)
                            rewrite_asserts(tree, *args)
                        except TypeError:
                            continue
                        except Exception:
                            break
                        variants.append(compile(tree, path, "exec", dont_inherit=True))
                        break
            out[path] = tuple(variants)
    return out

def _tg_seal(key, fd, pristine, root, trace, guarded, network=True, bases=None):
    # The audit hook that signs and writes every record, and the two functions the runner reports through.
    # What it holds (the key, the channel, the test code it accepts) is bound in its defaults: nothing else
    # refers to it, and Python offers no way to read or remove an audit hook but gc's introspection, whose
    # ways up the heap leave it out. A record counts only from this process (a fork's are dropped). "P"
    # records (reports) can only take a pass away; an "E" record (evidence: a listed test's own function
    # returned) is written only when the hook itself finds that the call came from `called` below, around a
    # function whose code is the listed test file's (compiled from the file's bytes before the repository
    # could run).
    import functools, hashlib, inspect, json, os, sys, threading, types
    # (see _tg_bases) a copy of its own: the runner's cfg["bases"] is reachable from the runner's frames
    bases = {k: tuple(v) for k, v in (bases or {}).items()}
    audit = sys.audit
    def report(record, _audit=audit, _dumps=json.dumps):
        _audit("toolgym.judge", _dumps(record))
    def wrap(target, nodeid, path=None, name=None, _audit=audit, _iscoroutine=inspect.iscoroutine,
             _update=functools.update_wrapper):
        # nodeid: the id the evidence is written under; path and name: the file and function the test's
        # code must be (a pytest node id's own, unless the runner says: a unittest case's module file).
        # The wrapper looks like the test's function (its name, docstring, attributes, signature): a test
        # sees its own as request.function (pytest's pytester names the files it writes by its __name__)
        if path is None:
            path, _, rest = nodeid.partition("::")
            name = rest.split("[")[0].split("::")[-1]
        async def awaited(coro, target, nodeid, path, name):
            try:
                result = await coro
            except BaseException:
                _audit("toolgym.judge.ran", False)
                raise
            _audit("toolgym.judge.ran", True)
            return result
        def called(*args, **kwargs):
            try:
                result = target(*args, **kwargs)
            except BaseException:
                _audit("toolgym.judge.ran", False)
                raise
            if _iscoroutine(result):
                return awaited(result, target, nodeid, path, name)
            _audit("toolgym.judge.ran", True)
            return result
        try:
            _update(called, target)
        except (AttributeError, TypeError):
            pass
        return called
    # the wrapper is the test's function to the tests: inspect finds the test's file through it, as
    # matplotlib's image_comparison finds its baseline images (by inspect.getfile of the function it
    # decorates: through the wrapper, the file was "<string>", and every image test failed)
    wrapper_code = next(
        c for c in wrap.__code__.co_consts if type(c) is types.CodeType and c.co_name == "called")
    def getfile(object, _real=inspect.getfile, _code=wrapper_code, _function=types.FunctionType):
        if type(object) is _function and object.__code__ is _code:
            object = getattr(object, "__wrapped__", object)
        return _real(object)
    getfile.__doc__ = inspect.getfile.__doc__
    inspect.getfile = getfile
    def codes_in(code, out):
        out[id(code)] = code
        for const in code.co_consts:
            if type(const) is types.CodeType:
                codes_in(const, out)
        return out
    # gc's two ways up the heap, get_objects and get_referrers, through the hook: what they return leaves
    # out the hook and its state (the key's holders, below), so a test suite's own leak checks (pytest's
    # test_teardown_issue1649: no TestCase left in gc.get_objects()) run; gc's own functions called
    # around these are tampering
    import gc
    def get_objects(generation=None, _real=gc.get_objects, _audit=audit):
        found = _real() if generation is None else _real(generation)
        _audit("toolgym.judge.unseen", found)
        return found
    def get_referrers(*objs, _real=gc.get_referrers, _audit=audit):
        found = _real(*objs)
        _audit("toolgym.judge.unseen", found)
        return found
    get_objects.__doc__, get_referrers.__doc__ = gc.get_objects.__doc__, gc.get_referrers.__doc__
    gc.get_objects, gc.get_referrers = get_objects, get_referrers
    ours = {}
    for fn in (_tg_tests, _tg_sealed, _tg_pytest, _tg_unittest, _tg_sympy, _tg_seal, _tg_pristine,
               _tg_expand, _tg_bases, _tg_find_test, _tg_docs, _tg_command_env, _tg_outcome,
               _tg_error_line, wrap, get_objects, get_referrers, getfile):
        codes_in(fn.__code__, ours)
    emitters = frozenset(id(c) for c in ours.values() if c.co_name in ("called", "awaited"))
    walkers = frozenset(id(c) for c in ours.values() if c.co_name in ("get_objects", "get_referrers"))
    # the reporting path as it is before the repository can run: changed later, it is named as tampering
    snapshot = []
    for holder in guarded:
        space = holder.__dict__
        snapshot.append((space, {k: id(v) for k, v in space.items() if type(k) is str and (
            isinstance(v, (types.FunctionType, type, classmethod, staticmethod, property))
            or callable(v))}))
    snapshot = tuple(snapshot)
    # gc.get_referents is not watched: it walks down from objects the caller holds, which attribute access
    # reaches too, and nothing the heap walks down from refers to the hook (get_objects and get_referrers,
    # which reach up, leave out the hook and whatever refers to it: the interpreter's list of audit hooks);
    # pandas calls it on every chained assignment check
    watched = frozenset({
        "toolgym.judge", "toolgym.judge.ran", "toolgym.judge.unseen", "exec", "code.__new__",
        "function.__new__", "object.__setattr__", "object.__delattr__", "gc.get_objects", "gc.get_referrers",
        "sys._current_frames", "sys._current_exceptions", "sys.settrace", "sys.setprofile", "ctypes.dlsym",
        "ctypes.cdata", "ctypes.string_at", "ctypes.wstring_at", "sys.addaudithook", "socket.__new__",
        "socket.getaddrinfo", "sys._getframe", "object.__getattr__"})
    # the ways to a frame object (sys._getframe, a traceback's, generator's or coroutine's frame): only
    # code that runs while the hook runs is refused them (below)
    frame_events = frozenset({"sys._getframe", "object.__getattr__"})
    busy = set()
    nested = set()  # threads whose hook is looking at an event raised while the hook ran
    me = []  # the id of the hook's own code
    genuine = {}
    told = [] if not network else [True]  # (an inet socket on a sandbox without a network: said once)
    looked = set()  # the host names looked up beyond the machine (a test that needs a real network)
    private = set()  # the ids of the hook, its defaults and its mutable state: what gc's walks leave out
    # While the hook runs, its frame holds what signs (its defaults are its locals), so nothing it calls may
    # run Python code that the repository can reach: a function it could replace or wrap (json.dumps looks
    # up json._default_encoder, hmac.new looks up hmac.HMAC and _hashlib's functions), a builtin looked up by
    # name, a str or int subclass's __eq__ or __hash__. From there sys._getframe climbs to the hook's frame.
    # So records are encoded here (flat objects of str and bool, with str.translate) and signed with HMAC
    # as its definition has it (RFC 2104), from hashlib.sha256 bound now and the key's two padded forms:
    # C functions only, on values of exact builtin types.
    escapes = {ord('"'): '\\"', ord("\\"): "\\\\", **{c: "\\u%04x" % c for c in range(32)}}
    def encode(record, _escapes=escapes, _type=type, _str=str, _bool=bool, _join=",".join):
        parts = []
        for name, value in record.items():
            if _type(value) is _bool:
                value = "true" if value else "false"
            elif _type(value) is _str:
                value = '"' + value.translate(_escapes) + '"'
            else:
                value = "null"
            parts.append('"' + name + '":' + value)
        return "{" + _join(parts) + "}"
    # Raw memory through ctypes is an installed package's own where the first frame outside ctypes is a
    # file under an entry of sys.path as it is before the repository runs (site directories, what their
    # .pth files add: a venv that sees another's packages, a conda or system prefix), one that neither
    # lies in the tree under test nor holds it, whose code calls it by name (numba's compiler reads LLVM's
    # buffers with string_at and sets its environments with from_address; its import reads
    # _Py_HashSecret with in_dll): a package's function handed ctypes.string_at to call
    # (pytest.raises(E, string_at, ...)) does not name it. The repository's own reads are refused.
    import importlib.util
    installed = set()
    for entry in sys.path:
        if not entry or not os.path.isabs(entry):
            continue
        real = os.path.realpath(entry) + os.sep
        if real.startswith(root) or root.startswith(real):
            continue
        installed.update((entry.rstrip(os.sep) + os.sep, real))
    installed = tuple(sorted(installed))
    spec = importlib.util.find_spec("ctypes")
    where = os.path.dirname(spec.origin) if spec is not None and spec.origin else None
    ctypes_dir = tuple({where + os.sep, os.path.realpath(where) + os.sep}) if where else ()
    native_names = {"ctypes.string_at": ("string_at",), "ctypes.wstring_at": ("wstring_at",),
                    "ctypes.cdata": ("from_address", "in_dll"), "ctypes.dlsym": ("in_dll",)}
    padded = key + bytes(64 - len(key))  # sha256's block
    inner = padded.translate(bytes(b ^ 0x36 for b in range(256)))
    outer = padded.translate(bytes(b ^ 0x5C for b in range(256)))
    def hook(event, args, _watched=watched, _busy=busy, _genuine=genuine, _pristine=pristine, _told=told,
             _looked=looked, _private=private, _walkers=walkers, _referents=gc.get_referents, _list=list,
             _any=any, _int=int, _frame_events=frame_events, _nested=nested, _me=me,
             _gc_isenabled=gc.isenabled, _gc_disable=gc.disable, _gc_enable=gc.enable,
             _emitters=emitters, _ours=frozenset(ours), _snapshot=snapshot, _inner=inner, _outer=outer,
             _fd=fd,
             _pid=os.getpid(), _getpid=os.getpid, _ident=threading.get_ident, _write=os.write,
             _exit=os._exit, _getframe=sys._getframe, _sha=hashlib.sha256,
             _dumps=encode, _id=id, _type=type, _str=str, _bool=bool, _len=len, _code=types.CodeType,
             _function=types.FunctionType, _method=types.MethodType, _endswith=str.endswith,
             _startswith=str.startswith, _partition=str.partition, _rpartition=str.rpartition, _trace=trace,
             _root=root, _codes_in=codes_in, _old=sys.version_info < (3, 9), _RuntimeError=RuntimeError,
             _bases=bases, _installed=installed, _ctypes_dir=ctypes_dir, _native_names=native_names,
             _OSError=OSError):
        if event not in _watched:
            return
        if event == "sys.addaudithook":
            # (no later hook may see the runner's frames from inside this one; CPython drops the exception,
            # so it never carries this frame out)
            raise _RuntimeError("refused")
        tid = _ident()
        if tid in _busy:
            if tid in _nested or _getpid() != _pid:
                return
            # an event raised while the hook runs: by the hook itself (its own sys._getframe), or by code that
            # runs meanwhile (a signal handler, a finalizer). That code may not reach a frame, gc's lists or
            # memory: this hook's frame, one above it, holds what signs
            _nested.add(tid)
            try:
                if _id(_getframe(1).f_code) not in _me:
                    data = b'E {"tampering":"' + event.encode() + b' while the judge signs a record"}'
                    mac = _sha(_outer + _sha(_inner + data).digest()).hexdigest()
                    try:
                        _write(_fd, mac.encode() + b" " + data + b"\n")
                    finally:
                        _exit(70)
            finally:
                _nested.discard(tid)
            return
        if event in _frame_events or _getpid() != _pid:
            return
        _busy.add(tid)
        collecting = _gc_isenabled()
        if collecting:
            _gc_disable()  # (no finalizer or gc callback runs while this frame holds what signs)
        try:
            kind, body, fatal = None, None, None
            if event == "toolgym.judge":
                if _len(args) == 1 and _type(args[0]) is _str:
                    kind, body = b"P", args[0]
            elif event == "toolgym.judge.ran":
                frame = _getframe(1)
                if _id(frame.f_code) not in _emitters or _len(args) != 1 or _type(args[0]) is not _bool:
                    fatal = "evidence of a test's run forged outside the runner"
                else:
                    where = frame.f_locals
                    nodeid, target = where.get("nodeid"), where.get("target")
                    path, name = where.get("path"), where.get("name")
                    fn = target.__func__ if _type(target) is _method else target
                    why = None
                    if _type(nodeid) is not _str or _type(fn) is not _function:
                        why = "not a plain test function"
                    elif _type(path) is not _str or _type(name) is not _str:
                        why = "no test file and name"
                    else:
                        # the id's own test name (pytest's and SymPy's after the last "::", unittest's
                        # after the last "."), and a pytest id's own file: the evidence names that test only
                        # (a parameter may hold "::" itself: requests' test_errors[http://fe80::5054:...])
                        bare = _partition(nodeid, "[")[0]
                        head, sep, tail = _rpartition(bare, "::")
                        if not sep:
                            tail = _rpartition(bare, ".")[2]
                        code = fn.__code__
                        if _partition(tail, "[")[0] != name or (sep and head.split("::")[0] != path):
                            why = "another test's function"
                        elif _id(code) not in _genuine:
                            why = "its code is not its test file's"
                        elif code.co_name != name or not _any(
                                _endswith(code.co_filename, "/" + f) for f in _bases.get(path, (path,))):
                            why = "another test's function"
                    for space, names in _snapshot:
                        for k, v in names.items():
                            if _id(space.get(k)) != v:
                                fatal = "the test runner's reporting path was changed (" + k + ")"
                    if fatal is None:
                        record = {"ran": nodeid, "returned": args[0]} if why is None else {
                            "ran": nodeid, "unverified": why}
                        kind, body = b"E", _dumps(record)
            elif event == "exec":
                code = args[0] if _len(args) else None
                if _type(code) is _code and _type(code.co_filename) is _str:
                    variants = _pristine.get(code.co_filename)
                    if variants is not None:
                        if _any(code == v for v in variants):
                            _codes_in(code, _genuine)
                        else:
                            fatal = "the code run as " + code.co_filename + " is not that file's"
            elif event == "toolgym.judge.unseen":
                found = args[0] if _len(args) == 1 else None
                if _type(found) is _list:
                    found[:] = [o for o in found if _id(o) not in _private and not _any(
                        _id(r) in _private for r in _referents(o))]
            elif event in ("gc.get_objects", "gc.get_referrers"):
                if _id(_getframe(1).f_code) not in _walkers:
                    fatal = event + " (a way into the runner's memory)"
            elif event == "socket.__new__":
                if not _told and _len(args) > 1 and _type(args[1]) is _int and args[1] in (2, 10):
                    _told.append(True)
                    kind, body = b"P", _dumps({"network": "wanted"})
            elif event == "socket.getaddrinfo":
                host = args[0] if _len(args) else None
                if _type(host) is bytes:
                    host = host.decode("ascii", "replace")
                if (_type(host) is _str and host not in _looked and _len(_looked) < 8 and ":" not in host
                        and host.strip("0123456789.") and host not in ("localhost", "localhost.localdomain")):
                    _looked.add(host)
                    kind, body = b"P", _dumps({"looked_up": host})
            elif event == "code.__new__":
                if not _old and _len(args) > 1 and _type(args[1]) is _str and args[1] in _pristine:
                    fatal = "a code object made for the test file " + args[1]
            elif event == "function.__new__":
                if _len(args) and (_id(args[0]) in _genuine or _id(args[0]) in _ours):
                    fatal = "a function made from a test's or the runner's code"
            elif event in ("object.__setattr__", "object.__delattr__"):
                if _len(args) > 1 and _type(args[0]) is _function and _type(args[1]) is _str and args[1] in (
                        "__code__", "__defaults__", "__kwdefaults__"):
                    code = args[0].__code__
                    if _id(code) in _genuine or _id(code) in _ours:
                        fatal = "a test's or the runner's function rewritten (" + args[1] + ")"
            elif event in ("sys.settrace", "sys.setprofile"):
                if not _trace:
                    caller = _getframe(1).f_code.co_filename
                    if _type(caller) is not _str or _startswith(caller, _root) or "/coverage/" not in caller:
                        fatal = event + " (a trace function can rewrite the runner's frames)"
            elif event in _native_names:
                name = args[1] if event == "ctypes.dlsym" and _len(args) > 1 else None
                # (allowed: PyCapsule_*, capsules hold C pointers, not objects, dill looks them up at import;
                # PyBytes_*, a bytes made from or read as raw memory, fsspec's at import)
                c_api = _type(name) is _str and (_startswith(name, "Py") or _startswith(name, "_Py"))
                if c_api and (_startswith(name, "PyCapsule_") or _startswith(name, "PyBytes_")):
                    c_api = False
                if event != "ctypes.dlsym" or c_api:
                    frame = _getframe(1)
                    while frame is not None and _type(frame.f_code.co_filename) is _str and _startswith(
                            frame.f_code.co_filename, _ctypes_dir):
                        frame = frame.f_back
                    caller = frame.f_code if frame is not None else None
                    file = caller.co_filename if caller is not None else None
                    names = _native_names[event] + ((name,) if _type(name) is _str else ())
                    if not (_type(file) is _str and _startswith(file, _installed) and not _startswith(
                            file, _root) and _any(n in caller.co_names for n in names)):
                        fatal = ("ctypes reaching Python's C API (" + name + ")" if name is not None
                                 else event + " (a way into the runner's memory)")
            else:  # other threads' frames
                fatal = event + " (a way into the runner's memory)"
            if fatal is not None:
                kind, body = b"E", _dumps({"tampering": fatal})
            if kind is not None:
                data = kind + b" " + body.encode("utf-8", "backslashreplace")
                try:
                    mac = _sha(_outer + _sha(_inner + data).digest()).hexdigest()  # HMAC-SHA256
                    _write(_fd, mac.encode() + b" " + data + b"\n")
                except _OSError:
                    _exit(75)  # the channel was closed or replaced: no record can reach the judge
            if fatal is not None:
                _exit(70)
        except BaseException:
            pass  # (an exception leaving the hook would carry its frame out in its traceback)
        finally:
            _busy.discard(tid)
            if collecting:
                _gc_enable()
    private.update(id(o) for o in (
        hook, hook.__defaults__, busy, genuine, told, looked, pristine, snapshot, private, *snapshot,
        bases, *bases.values(),
        *(names for _, names in snapshot), encode, encode.__defaults__, escapes, nested, me))
    me.append(id(hook.__code__))
    sys.addaudithook(hook)
    return report, wrap

def _tg_find_test(obj, name, paths):
    # the test's own function inside what pytest will call (itself, a bound method, or a decorator's
    # wrapper that holds it in a closure), defined in one of `paths` (its test file, or a file its class's
    # bases come from): (the function, the closure cell holding it or None)
    ends = tuple("/" + p for p in paths)
    seen, todo = set(), [(obj, None)]
    while todo and len(seen) < 16:
        fn, cell = todo.pop(0)
        fn = getattr(fn, "__func__", fn)
        if id(fn) in seen or not callable(fn):
            continue
        seen.add(id(fn))
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_name == name and code.co_filename.endswith(ends):
            return fn, cell
        for c in getattr(fn, "__closure__", None) or ():
            try:
                todo.append((c.cell_contents, c))
            except ValueError:
                pass
    return None, None

def _tg_sealed(cfg, key, guarded):
    # the seal installed (the key goes into it), or on Python 3.7 and older (no audit hooks) records signed
    # here and no evidence (the verdict says so): (send, wrap or None)
    import os, sys
    network = cfg.get("network", True)
    if hasattr(sys, "addaudithook"):
        bases = _tg_bases(cfg["root"], cfg["files"], cfg.get("changed", ()))
        cfg["bases"] = bases
        pristine = _tg_pristine(cfg["root"], sorted({f for found in bases.values() for f in found}))
        return _tg_seal(key, cfg["fd"], pristine, os.path.realpath(cfg["root"]) + os.sep, cfg["trace"],
                        guarded, network, bases)
    import hashlib, hmac, json
    def send(record, _key=key, _fd=cfg["fd"], _dumps=json.dumps, _new=hmac.new, _sha=hashlib.sha256,
             _write=os.write):
        data = _dumps(record).encode()
        _write(_fd, _new(_key, b"P " + data, _sha).hexdigest().encode() + b" P " + data + b"\n")
    if not network:  # no audit event to see an inet socket by: socket.socket's own constructor says it
        import socket
        opened, told = socket.socket.__init__, []
        def init(self, *args, **kwargs):
            family = args[0] if args else kwargs.get("family", -1)
            fileno = kwargs.get("fileno", args[3] if len(args) > 3 else None)
            if not told and family in (-1, 2, 10) and fileno is None:
                told.append(True)
                send({"network": "wanted"})
            opened(self, *args, **kwargs)
        socket.socket.__init__ = init
    return send, None

def _tg_tests(cfg, key):
    # the row's test command's runner: pytest, a script that runs unittest cases (Django's
    # tests/runtests.py), or SymPy's bin/test
    kind = (cfg.get("runner") or {}).get("kind", "pytest")
    run = {"pytest": _tg_pytest, "unittest": _tg_unittest, "sympy": _tg_sympy}[kind]
    box = [key]
    del key  # (this frame stays while the tests run: it must not hold the key, which the runner seals away)
    return run(cfg, box.pop())

def _tg_command_env(runner):
    # what the test command sets before its program: variables, and PYTHONWARNINGS as the warning filters
    # it stands for (this process runs with -I, which ignores PYTHON* variables)
    import os, warnings
    for name, value in sorted((runner.get("env") or {}).items()):
        if name == "PYTHONWARNINGS":
            for option in value.split(","):
                if option.strip():
                    try:
                        warnings._setoption(option.strip())
                    except Exception:
                        pass
        elif not name.startswith("PYTHON"):
            os.environ[name] = value

def _tg_docs(root, files):
    # the first line of each test method's docstring, read from the listed test files' bytes before the
    # repository can run (Django's verbose runner names a test by it): {(file, class, method): line}
    import ast, os
    out = {}
    for rel in _tg_expand(root, files):
        path = os.path.join(root, rel)
        if not rel.endswith(".py") or not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as fh:
                tree = ast.parse(fh.read(), filename=path)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        doc = ast.get_docstring(item)
                        if doc and doc.strip():
                            out[(rel, node.name, item.name)] = doc.strip().split("\n")[0].strip()
    return out

def _tg_outcome(send, tid, outcome, message="", xfail=False, when="call"):
    send({"id": tid, "when": when, "outcome": outcome, "xfail": xfail, "message": message[:500]})

def _tg_error_line(err):
    try:
        return (err[0].__name__ + ": " + str(err[1]))[:500]
    except Exception:
        return "an error that cannot be shown"

def _tg_unittest(cfg, key):
    # A script that runs unittest cases (Django's tests/runtests.py), run as __main__ in this process.
    # Every case runs through the runner's own TestCase.run (put on unittest's TestCase before the
    # repository can run, so the seal's snapshot holds it): it reports each outcome through a result of its
    # own in front of the script's (a result class of the repository's that swallows failures hides
    # nothing), and wraps the test's own method for the evidence. A case class of the repository's that
    # runs its tests another way gives no evidence: its tests do not pass.
    import faulthandler, os, runpy, sys, unittest, unittest.case, unittest.result, unittest.suite
    runner = cfg["runner"]
    root = os.path.realpath(cfg["root"])
    limit = float(cfg["test_timeout"])
    docs = _tg_docs(cfg["root"], cfg["files"])
    wanted = None if cfg["ids"] is None else frozenset(cfg["ids"])
    original = unittest.case.TestCase.run
    box = {}

    def relative(module):
        path = getattr(sys.modules.get(module), "__file__", None) or ""
        path = os.path.realpath(path)
        return path[len(root) + 1:] if path.startswith(root + os.sep) else path

    class Tee(object):
        # the script's result, with every outcome reported first
        __slots__ = ("_tg_result", "_tg_id")
        def __init__(self, result, tid):
            object.__setattr__(self, "_tg_result", result)
            object.__setattr__(self, "_tg_id", tid)
        def __getattr__(self, name):
            return getattr(object.__getattribute__(self, "_tg_result"), name)
        def __setattr__(self, name, value):
            setattr(object.__getattribute__(self, "_tg_result"), name, value)
        def _say(self, outcome, message="", xfail=False):
            _tg_outcome(box["send"], object.__getattribute__(self, "_tg_id"), outcome, message, xfail)
        def _then(self, name, *args):
            method = getattr(object.__getattribute__(self, "_tg_result"), name, None)
            if method is not None:
                return method(*args)
        def addSuccess(self, test):
            self._say("passed")
            return self._then("addSuccess", test)
        def addFailure(self, test, err):
            self._say("failed", _tg_error_line(err))
            return self._then("addFailure", test, err)
        def addError(self, test, err):
            self._say("failed", _tg_error_line(err))
            return self._then("addError", test, err)
        def addSkip(self, test, reason):
            self._say("skipped", str(reason))
            return self._then("addSkip", test, reason)
        def addExpectedFailure(self, test, err):  # (SWE-bench's parser records none: not a pass)
            self._say("skipped", "expected failure: " + _tg_error_line(err))
            return self._then("addExpectedFailure", test, err)
        def addUnexpectedSuccess(self, test):
            self._say("failed", "unexpected success")
            return self._then("addUnexpectedSuccess", test)
        def addSubTest(self, test, subtest, err):
            if err is not None:
                self._say("failed", "subtest " + str(subtest) + ": " + _tg_error_line(err))
            return self._then("addSubTest", test, subtest, err)

    def run(self, result=None, _original=original):
        if box.get("inside"):  # a case a test runs itself (Django's test_utils do): the test's own business
            return _original(self, result)
        box["inside"] = True
        try:
            return outer(self, result, _original)
        finally:
            box["inside"] = False

    def outer(self, result, _original):
        send, wrap = box["send"], box["wrap"]
        cls = type(self)
        name = getattr(self, "_testMethodName", "")
        module, qualname = cls.__module__, getattr(cls, "__qualname__", cls.__name__)
        tid = module + "." + qualname + "." + name
        owner = next((k for k in cls.__mro__ if name in vars(k)), cls)
        path = relative(owner.__module__)
        forms = [name + " (" + module + "." + qualname + ")", name + " (" + tid + ")", tid]
        doc = docs.get((path, owner.__name__, name))
        if doc:
            forms.append(doc)
        if wanted is not None and not wanted.intersection(forms):
            return None  # not listed: not run (as pytest deselects), the script's result never hears of it
        send({"collected": [tid], "forms": {tid: forms}})
        send({"start": tid})
        undo = []
        method = getattr(self, name, None)
        fn, cell = _tg_find_test(method, name, (path,)) if (wrap is not None and method is not None) else (
            None, None)
        if fn is not None and cell is None:
            wrapped = wrap(method, tid, path, name)
            for attr in ("__unittest_skip__", "__unittest_skip_why__", "__unittest_expecting_failure__"):
                if hasattr(method, attr):
                    setattr(wrapped, attr, getattr(method, attr))
            self.__dict__[name] = wrapped
            undo.append(lambda: self.__dict__.pop(name, None))
        elif fn is not None:
            inner = cell.cell_contents
            cell.cell_contents = wrap(inner, tid, path, name)
            undo.append(lambda: setattr(cell, "cell_contents", inner))
        own = result is None
        if own:
            result = self.defaultTestResult()
            getattr(result, "startTestRun", lambda: None)()
        faulthandler.dump_traceback_later(limit, exit=True)
        try:
            return _original(self, Tee(result, tid))
        finally:
            faulthandler.cancel_dump_traceback_later()
            for step in reversed(undo):
                step()
            if own:
                getattr(result, "stopTestRun", lambda: None)()
            _tg_outcome(send, tid, "passed", when="teardown")

    run.__name__ = run.__qualname__ = "run"
    unittest.case.TestCase.run = run
    guarded = [unittest.case, unittest.case.TestCase, unittest.result, unittest.result.TestResult,
               unittest.suite, unittest.suite.TestSuite, unittest.suite.BaseTestSuite]
    send, wrap = _tg_sealed(cfg, key, guarded)
    box.update(send=send, wrap=wrap)
    del key
    send({"ready": True, "sealed": bool(wrap is not None)})
    script = os.path.join(cfg["root"], runner["program"])
    sys.path.insert(0, os.path.dirname(script))  # as `python script`: the script's directory first
    sys.argv = [script] + list(runner["args"])
    _tg_command_env(runner)
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    send({"finished": int(code)})
    return int(code)

def _tg_sympy(cfg, key):
    # SymPy's bin/test, played here by its rules: the runner in the repository (sympy/testing/runtests.py)
    # is code under test, so this runner reads each listed test file itself (run in globals holding only
    # __file__, as SymPy's does), runs its test_ functions in the order of their lines, each after
    # random.seed and with SymPy's deprecation warnings as errors, and sorts their exceptions as SymPy's
    # runner does (Skipped by name: skipped; XFail, XPass: not a pass, SWE-bench's parser records
    # neither; any other: failed). -C: no cache; --slow: the slow tests too (else they are skipped).
    import faulthandler, inspect, os, random, sys, warnings
    runner = cfg["runner"]
    args = list(runner["args"])
    root = os.path.realpath(cfg["root"])
    limit = float(cfg["test_timeout"])
    send, wrap = _tg_sealed(cfg, key, [])
    del key
    send({"ready": True, "sealed": bool(wrap is not None)})
    _tg_command_env(runner)
    if "-C" in args or "--no-cache" in args:
        os.environ["SYMPY_USE_CACHE"] = "no"
    slow = "--slow" in args
    wanted = None if cfg["ids"] is None else frozenset(cfg["ids"])
    seed = 0
    for i, a in enumerate(args):
        if a == "--seed" and i + 1 < len(args) and args[i + 1].isdigit():
            seed = int(args[i + 1])
    sys.path.insert(0, cfg["root"])
    try:
        from sympy.core.cache import clear_cache
    except Exception:
        clear_cache = lambda: None
    try:
        from sympy.utilities.exceptions import SymPyDeprecationWarning as deprecated
    except Exception:
        deprecated = None
    code = 0
    targets = [a for a in args if a.endswith(".py")] or [f for f in cfg["files"] if f.endswith(".py")]
    for rel in targets:
        path = os.path.join(cfg["root"], rel)
        try:
            with open(path, "rb") as fh:
                source = fh.read()
            gl = {"__file__": path}
            exec(compile(source, path, "exec", dont_inherit=True), gl)
        except Exception as exc:
            send({"file_error": rel, "message": _tg_error_line((type(exc), exc))})
            sys.stderr.write(rel + " could not be run: " + _tg_error_line((type(exc), exc)) + "\n")
            code = 1
            continue
        clear_cache()
        random.seed(seed)
        if gl.get("disabled", False):
            continue
        funcs = []
        for fname, f in list(gl.items()):
            inner = f
            while hasattr(inner, "__wrapped__"):
                inner = inner.__wrapped__
            fcode = getattr(inner, "__code__", None)
            if fname.startswith("test_") and callable(f) and fcode is not None and fcode.co_filename == path:
                if wanted is None or fname in wanted:  # (the others are not run, as pytest deselects)
                    funcs.append((fcode.co_firstlineno, fname, f))
        for _, fname, f in sorted(funcs, key=lambda t: t[0]):
            tid = rel + "::" + fname
            send({"collected": [tid], "forms": {tid: [fname]}})
            send({"start": tid})
            fn, cell = _tg_find_test(f, fname, (rel,)) if wrap is not None else (None, None)
            call, undo = f, None
            if fn is not None and cell is None:
                call = wrap(f, tid, rel, fname)
            elif fn is not None:
                inner = cell.cell_contents
                cell.cell_contents = wrap(inner, tid, rel, fname)
                undo = (cell, inner)
            faulthandler.dump_traceback_later(limit, exit=True)
            try:
                if getattr(f, "_slow", False) and not slow:
                    _tg_outcome(send, tid, "skipped", "Slow")
                elif inspect.isgeneratorfunction(fn or f):
                    _tg_outcome(send, tid, "skipped", "a generator of tests (SWE-bench records none)")
                else:
                    random.seed(seed)
                    with warnings.catch_warnings():
                        warnings.filterwarnings("error", ".*", DeprecationWarning, module="sympy.*")
                        if deprecated is not None:
                            warnings.simplefilter("error", deprecated)
                        call()
                    _tg_outcome(send, tid, "passed")
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                kind = type(exc).__name__
                if kind == "Skipped":
                    _tg_outcome(send, tid, "skipped", str(exc))
                elif kind == "XFail":
                    _tg_outcome(send, tid, "skipped", "XFail: an expected failure")
                else:
                    _tg_outcome(send, tid, "failed", "XPass" if kind == "XPass" else _tg_error_line(
                        (type(exc), exc)))
                    code = 1
            finally:
                faulthandler.cancel_dump_traceback_later()
                if undo is not None:
                    undo[0].cell_contents = undo[1]
                clear_cache()
                _tg_outcome(send, tid, "passed", when="teardown")
    send({"finished": code})
    return code

def _tg_pytest(cfg, key):
    import faulthandler, os, re, sys
    import pytest, _pytest.main, _pytest.runner, _pytest.python, _pytest.terminal, _pytest.skipping
    import _pytest.unittest, unittest, unittest.case, unittest.result
    import pluggy
    try:  # (pytest before 3.6 kept its reports in _pytest.runner, before 3.5 its nodes in _pytest.main)
        import _pytest.reports as reports
    except ImportError:
        reports = _pytest.runner
    try:
        import _pytest.nodes as nodes
        nodes.Item, nodes.Node
    except (ImportError, AttributeError):
        nodes = _pytest.main
    guarded = [_pytest.runner, reports, _pytest.python, _pytest.unittest, _pytest.main,
               _pytest.skipping, reports.TestReport, getattr(reports, "BaseReport", reports.TestReport),
               _pytest.runner.CallInfo, _pytest.python.Function, _pytest.unittest.TestCaseFunction,
               nodes.Item, nodes.Node, unittest.case.TestCase, unittest.result.TestResult]
    # (and what a test asserts with: pytest.raises, approx, warns, fail, skip; assertion rewriting's helpers)
    for name in ("pytest", "_pytest.python_api", "_pytest.raises", "_pytest.recwarn", "_pytest.outcomes",
                 "_pytest.assertion.rewrite", "_pytest.assertion.util", "pluggy._callers", "pluggy._hooks",
                 "pluggy._manager"):
        module = sys.modules.get(name)
        if module is not None:
            guarded.append(module)
    for name in ("HookCaller", "_HookCaller", "HookImpl", "PluginManager"):
        if hasattr(pluggy, name) or hasattr(sys.modules.get("pluggy._hooks"), name):
            guarded.append(getattr(pluggy, name, None) or getattr(sys.modules["pluggy._hooks"], name))
    send, wrap = _tg_sealed(cfg, key, guarded)
    del key
    # unittest is imported here, to guard it, where `python -m pytest` may not have imported it (pytest
    # before 7.2 does not, nor does pytest's own tree before then): pytester's in-process runs then drop
    # it with the modules they imported, and each run imports a fresh one. Here it stays, and what one
    # run's collection put on its classes reaches the next (a test file's `from unittest import TestCase`
    # collects TestCase itself, and its setUpClass fixture then skipped pytest-10081's skipped class
    # before the code under test ran: its bare tree passed). So where nothing but this import holds
    # unittest when the first test starts (no module but unittest's own names its modules, classes or
    # functions: compared by identity, no object's code runs), each test's additions to unittest's
    # classes are undone after it, as a fresh import would have them; where pytest or a test file holds
    # it, they stay, as they do under `python -m pytest`
    import types
    ut_modules = [m for n, m in list(sys.modules.items()) if n == "unittest" or n.startswith("unittest.")]
    ut_classes = [v for m in (unittest.case, unittest.result) for v in vars(m).values()
                  if isinstance(v, type) and v.__module__ == m.__name__]
    ut_state = {}
    def unittest_only_ours():
        if "only_ours" not in ut_state:
            own = {id(m) for m in ut_modules}
            for m in ut_modules:
                own.update(id(v) for v in vars(m).values()
                           if isinstance(v, (type, types.FunctionType))
                           and str(getattr(v, "__module__", "")).startswith("unittest"))
            module_dict = types.ModuleType.__dict__["__dict__"].__get__
            held = False
            for name, module in list(sys.modules.items()):
                if name == "__main__" or name == "unittest" or name.startswith("unittest.") \
                        or types.ModuleType not in type(module).__mro__:
                    continue
                try:
                    if any(id(v) in own for v in list(module_dict(module).values())):
                        held = True
                        break
                except Exception:
                    continue
            ut_state["only_ours"] = not held
        return ut_state["only_ours"]
    wanted = None if cfg["ids"] is None else frozenset(cfg["ids"])
    rule = cfg.get("id_rule", "exact")
    def listed(nodeid):  # the forms a dataset may list this test under (toolgym.rewards.swe.listed_forms)
        forms = {nodeid}
        if rule != "exact":
            cut = nodeid.split()[0] if nodeid.split() else nodeid
            forms.add(cut)
            if "[" in cut and cut.endswith("]"):
                main, option = cut[:-1].split("[", 1)
                digits = re.search(r"(?<!_)\d{1,2}$", option[1:])  # a duplicate id's index: a0 or a_0
                if digits:
                    for n in range(1, len(digits.group()) + 1):
                        forms.add(main + "[" + option[:-n] + "_" + option[-n:] + "]")
                dedup = re.fullmatch(r"(.+)_(\d{1,2})", option)
                if dedup:
                    forms.add(main + "[" + dedup.group(1) + dedup.group(2) + "]")
                if rule == "pytest_options" and option.startswith("/") and not option.startswith("//") \
                        and "*" not in option:
                    forms.add(main + "[/" + option.split("/")[-1] + "]")
        return forms
    limit = float(cfg["test_timeout"])
    bases = cfg.get("bases") or {}  # (set by _tg_sealed: where each listed file's tests' functions may be)
    root = os.path.realpath(cfg["root"]) + os.sep
    trace = cfg["trace"]
    def test_name(nodeid):
        path, _, rest = nodeid.partition("::")
        return path, rest.split("[")[0].split("::")[-1]
    class _Reporter:
        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, session, config, items):
            keep = [i for i in items if wanted is None or listed(i.nodeid) & wanted]
            drop = [i for i in items if wanted is not None and not listed(i.nodeid) & wanted]
            items[:] = keep
            if drop:
                config.hook.pytest_deselected(items=drop)
            send({"collected": [i.nodeid for i in keep]})
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            send({"start": item.nodeid})
            seen = set()
            if trace:  # the miner's coverage: which of the repository's functions each test calls
                def profile(frame, event, arg, seen=seen):
                    if event == "call":
                        seen.add(frame.f_code)
                sys.setprofile(profile)
            before = [(c, frozenset(vars(c))) for c in ut_classes] if unittest_only_ours() else ()
            faulthandler.dump_traceback_later(limit, exit=True)
            yield
            faulthandler.cancel_dump_traceback_later()
            for c, names in before:
                for name in [n for n in vars(c) if n not in names]:
                    try:
                        delattr(c, name)
                    except (AttributeError, TypeError):
                        pass
            if trace:
                sys.setprofile(None)
                found = set()
                for code in seen:
                    path = os.path.realpath(code.co_filename)
                    if path.startswith(root):
                        found.add((path[len(root):], getattr(code, "co_qualname", code.co_name)))
                send({"covered": item.nodeid, "functions": sorted(found)})
        @pytest.hookimpl(hookwrapper=True, trylast=True)
        def pytest_runtest_call(self, item):
            # the test's own function, wrapped for the call: its return is the evidence that it passed
            # (pytest calls item.obj, a unittest.TestCase's method included; older pytest calls the method
            # on the case, so it is wrapped there too). Innermost of the wrappers (trylast), so that the
            # others see the test's own function: pytest's skipping plugin evaluates an xfail mark's
            # string condition again after the call, in item.obj.__globals__ (astropy's
            # @pytest.mark.xfail('MATPLOTLIB_LT_15') was a NameError in the wrapper's)
            undo = []
            obj = getattr(item, "obj", None) if wrap is not None else None
            path, name = test_name(item.nodeid)
            fn, cell = _tg_find_test(obj, name, bases.get(path, (path,))) if obj is not None else (None, None)
            if fn is not None and cell is None:
                wrapped = wrap(obj, item.nodeid)
                item.obj = wrapped
                undo.append(lambda: setattr(item, "obj", obj))
                case = getattr(item, "_testcase", None)
                if case is not None and getattr(case, "_testMethodName", None) == name:
                    setattr(case, name, wrapped)
                    undo.append(lambda: case.__dict__.pop(name, None))
            elif fn is not None:
                inner = cell.cell_contents
                cell.cell_contents = wrap(inner, item.nodeid)
                undo.append(lambda: setattr(cell, "cell_contents", inner))
            try:
                yield
            finally:
                for step in reversed(undo):
                    step()
        def pytest_runtest_logreport(self, report):
            crash = getattr(report.longrepr, "reprcrash", None)
            send({"id": report.nodeid, "when": report.when, "outcome": report.outcome,
                  "xfail": bool(getattr(report, "wasxfail", None) is not None and report.skipped),
                  "message": getattr(crash, "message", "")[:500] if report.failed else ""})
        def pytest_sessionfinish(self, session, exitstatus):
            send({"finished": int(exitstatus)})
    send({"ready": True, "sealed": bool(wrap is not None)})
    # as `python -m pytest` from the repository's root, by the path pytest itself sees it at (the working
    # directory's real path, where /testbed is a link): one module imported by two paths is two modules to
    # pytest 7 (a package imported before pytest read its conftest.py had that conftest registered twice)
    sys.path.insert(0, os.path.realpath(cfg["root"]))
    # (plugins imported before pytest started cannot have their asserts rewritten: pytest says so, needlessly;
    # an older pytest (3.5: scikit-learn 0.22's era) has no such warning, and a filter naming it is an
    # internal error there)
    rewrite = "PytestAssertRewriteWarning"
    quiet = ["-W", f"ignore::pytest.{rewrite}"] if hasattr(pytest, rewrite) else []
    args = ["-q", "-p", "no:cacheprovider", "--continue-on-collection-errors", *quiet, *cfg["files"]]
    return int(pytest.main(args, plugins=[_Reporter()]))
"""

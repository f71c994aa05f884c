"""The test harness that runs *inside* a sandbox session for ``toolgym.rewards.code`` (stdlib only).

``toolgym.rewards.code.runner`` sends this file's source as the first call of a fresh sandbox session, then
the hidden tests as the second call (the threat model is in ``toolgym.rewards.code``). It is shipped as one
source and runs with the standard library alone, which is why it is one module. Three kinds of process:

``driver``
    The session interpreter itself. It receives the hidden tests (second call), runs each one, and writes
    one nonce-tagged line per test to its stdout. It never executes a line of the solution: every name the
    tests take from the solution is a proxy, and every call through it is a message to a worker.
``zygote``
    Forked by the driver during the first call, when no test exists in any process yet. It compiles the
    solution (never runs it), closes every descriptor but its channel to the driver, and forks one worker per
    test on request, handing the driver the worker's pid and a fresh socket.
``worker``
    Runs the task's setup and the solution, then answers the driver's calls. What it sends back is decoded
    by the driver into *plain values of exact builtin types* (``decode``), so a worker can claim any return
    value but can neither run code in the driver nor reach its memory, its stdout or the tests.

Every process is made non-dumpable before the first fork, so no worker can open ``/proc/<driver>/fd/1``,
``/proc/<driver>/mem`` or the zygote's channel, even though they share a uid.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import json
import os
import signal
import socket
import struct
import sys
import time
import types

_LEN = struct.Struct(">I")
MAX_FRAME = 1 << 25  # one reply (a returned value) may be up to 32 MiB of JSON
MAX_DEPTH = 100  # nesting of a returned value
MAX_INT_HEX = 1 << 16  # hex digits of a returned int (~80,000 decimal digits)
_PR_SET_DUMPABLE = 4
#: how long the zygote may take to fork a test's worker. That is setup, not the solution's time: a test's own
#: clock starts once its worker exists, so a slow machine does not eat into a short per-test limit.
SPAWN_TIMEOUT = 10.0
_REASON_CHARS = 300
# Exceptions a solution raises are re-raised in the driver as the builtin class of the same name, so tests
# that expect a ValueError still work, except these, which would change the *test's* control flow
# (StopIteration ends a ``map``/generator early) or its exit.
_NOT_MIRRORED = frozenset({"StopIteration", "StopAsyncIteration", "GeneratorExit"})


class Unencodable(TypeError):
    """A value that is not plain data (and no reference hook was given)."""


class BadReply(ValueError):
    """A worker sent something that is not a well-formed message."""


class SolutionError(Exception):
    """The solution raised an exception that has no builtin counterpart (or one that is not mirrored)."""


class SolutionGone(BaseException):
    """The worker exited, crashed or broke the protocol in the middle of a test (a BaseException: a test's
    ``except Exception`` must not carry on as if the solution had merely raised)."""


class _TestTimeout(BaseException):
    """The test's time is up (raised by the driver's own timer; BaseException so tests cannot catch it)."""


# ------------------------------------------------------------------------------------------ the clock

# A test's limit is the solution's own time (``toolgym.util.program_clock``). In a sandbox the runner
# runs that module's source ahead of this one's, in the same namespace; imported here as a module, it comes
# from toolgym.
if "ProgramClock" not in globals():  # pragma: no branch
    from toolgym.util.program_clock import STARVED_FACTOR, ProgramClock


class _Starved(Exception):
    """The machine kept a test's solution from a CPU past ``STARVED_FACTOR`` times its limit."""


# ------------------------------------------------------------------------------------------ the codec


def encode(value, ref=None, depth=0):
    """``value`` as tagged JSON data. Exact builtin types only: a subclass of ``int`` or ``list`` is not
    plain data. Anything else goes through ``ref`` (which returns a tagged reference) or is refused."""
    t = type(value)
    if value is None:
        return ["n"]
    if t is bool:
        return ["b", value]
    if t is int:
        return ["i", format(value, "x")]
    if t is float:
        return ["f", value.hex()]
    if t is str:
        return ["s", value]
    if t is bytes:
        return ["y", value.hex()]
    if t is complex:
        return ["c", value.real.hex(), value.imag.hex()]
    if depth >= MAX_DEPTH:
        raise Unencodable(f"value nested more than {MAX_DEPTH} levels deep")
    if t is list or t is tuple or t is set or t is frozenset:
        tags: dict[type, str] = {list: "l", tuple: "t", set: "S", frozenset: "F"}
        tag = tags[t]
        return [tag, [encode(x, ref, depth + 1) for x in value]]
    if t is dict:
        return ["d", [[encode(k, ref, depth + 1), encode(v, ref, depth + 1)] for k, v in value.items()]]
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):  # np.int64(3) is the plain value 3
        return encode(value.item(), ref, depth + 1)
    if ref is not None:
        return ref(value)
    raise Unencodable(f"{t.__name__} is not plain data")


def decode(obj, ref=None, depth=0):
    """The value tagged data stands for, built from exact builtin types only. Raises ``BadReply`` for
    anything malformed; ``ref(id, type_name)`` resolves references (without it they are malformed)."""
    if type(obj) is not list or not obj or type(obj[0]) is not str:
        raise BadReply("malformed value")
    if depth >= MAX_DEPTH + 2:
        raise BadReply("value nested too deeply")
    tag, args = obj[0], obj[1:]
    try:
        if tag == "n" and not args:
            return None
        if tag == "b" and len(args) == 1 and type(args[0]) is bool:
            return args[0]
        if tag == "i" and len(args) == 1 and type(args[0]) is str and len(args[0]) <= MAX_INT_HEX:
            return int(args[0], 16)
        if tag == "f" and len(args) == 1 and type(args[0]) is str:
            return float.fromhex(args[0])
        if tag == "s" and len(args) == 1 and type(args[0]) is str:
            return args[0]
        if tag == "y" and len(args) == 1 and type(args[0]) is str:
            return bytes.fromhex(args[0])
        if tag == "c" and len(args) == 2 and all(type(a) is str for a in args):
            return complex(float.fromhex(args[0]), float.fromhex(args[1]))
        if tag in ("l", "t", "S", "F") and len(args) == 1 and type(args[0]) is list:
            items = [decode(x, ref, depth + 1) for x in args[0]]
            return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
        if tag == "d" and len(args) == 1 and type(args[0]) is list:
            out = {}
            for pair in args[0]:
                if type(pair) is not list or len(pair) != 2:
                    raise BadReply("malformed dict item")
                out[decode(pair[0], ref, depth + 1)] = decode(pair[1], ref, depth + 1)
            return out
        if tag == "r" and ref is not None and len(args) == 2 and type(args[0]) is int:
            return ref(args[0], str(args[1])[:80])
    except BadReply:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:  # unhashable key, bad hex, ...
        raise BadReply(f"malformed value ({type(exc).__name__})") from None
    raise BadReply(f"malformed value (tag {tag[:10]!r})")


# ------------------------------------------------------------------------------------------ framing


def send_frame(sock, obj):
    data = json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode()
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock, n, deadline):
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _TestTimeout()
            sock.settimeout(remaining)
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except TimeoutError:
            raise _TestTimeout() from None
        except OSError as exc:
            raise SolutionGone(f"the solution's process broke the channel ({exc})") from None
        if not chunk:
            raise SolutionGone("the solution's process exited or crashed")
        buf += chunk
    return bytes(buf)


def recv_frame(sock, deadline=None):
    """One JSON frame; ``deadline`` (monotonic) bounds the wait. Malformed frames raise ``SolutionGone``."""
    (length,) = _LEN.unpack(_recv_exact(sock, 4, deadline))
    if length > MAX_FRAME:
        raise SolutionGone(f"the solution's process sent a message of {length} bytes (limit {MAX_FRAME})")
    try:
        return json.loads(_recv_exact(sock, length, deadline))
    except (ValueError, RecursionError):
        raise SolutionGone("the solution's process sent a malformed message") from None


def _message(exc):
    """``str(exc)``, safely (a solution's ``__str__`` may itself raise)."""
    try:
        return str(exc)[:_REASON_CHARS]
    except BaseException:
        return ""


def _describe(exc):
    """``Type: message`` of an exception."""
    message = _message(exc)
    return f"{type(exc).__name__}: {message}"[:_REASON_CHARS] if message else type(exc).__name__


# ------------------------------------------------------------------------------------------ worker


def _worker_main(sock, compiled):  # pragma: no cover - runs in a forked worker
    """Run setup + solution, then serve calls until the driver kills us. Never returns."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    module = types.ModuleType("solution")
    sys.modules["solution"] = module
    try:
        for code in compiled:
            exec(code, module.__dict__)
    except BaseException as exc:  # SystemExit from a top-level sys.exit() is a failed load, not a pass
        send_frame(sock, {"ready": False, "error": _describe(exc)})
        os._exit(0)
    send_frame(sock, {"ready": True})
    refs = []

    def add_ref(value):
        refs.append(value)
        return ["r", len(refs) - 1, type(value).__name__[:80]]

    def resolve(ref_id, _type_name):
        if not 0 <= ref_id < len(refs):
            raise BadReply("unknown reference")
        return refs[ref_id]

    while True:
        request = recv_frame(sock)
        try:
            kind, key = request["t"]
            if kind == "g":
                if key not in module.__dict__:
                    raise NameError(f"name {key!r} is not defined")
                target = module.__dict__[key]
            else:
                target = resolve(key, "")
            if request["op"] == "getattr":
                reply = {"v": encode(getattr(target, request["n"]), add_ref)}
            elif request["op"] == "iter":  # a generator, map or zip the solution returned
                reply = {"v": encode(list(target), add_ref)}
            else:
                args = [decode(a, resolve) for a in request["a"]]
                kwargs = {k: decode(v, resolve) for k, v in request["k"]}
                reply = {"v": encode(target(*args, **kwargs), add_ref)}
        except BaseException as exc:  # includes SystemExit: a function that exits did not return a value
            reply = {"e": type(exc).__name__[:80], "m": _message(exc)}
        send_frame(sock, reply)


def _zygote_main(zsock, setup_src, solution_src):  # pragma: no cover - runs in the forked zygote
    """Compile the solution, then fork a worker per request. Never returns."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    keep = zsock.fileno()
    top = max(os.sysconf("SC_OPEN_MAX"), keep + 1)
    os.closerange(3, keep)
    os.closerange(keep + 1, top)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    try:
        compiled = (compile(setup_src, "<setup>", "exec"), compile(solution_src, "<solution>", "exec"))
        hello = {"ok": True}
    except BaseException as exc:
        compiled, hello = None, {"ok": False, "error": _describe(exc)}
    zsock.send(json.dumps(hello).encode())
    while True:
        try:
            if not zsock.recv(16):
                os._exit(0)
        except OSError:
            os._exit(0)
        a, b = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            zsock.close()
            a.close()
            try:
                _worker_main(b, compiled)
            finally:
                os._exit(0)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        b.close()
        socket.send_fds(zsock, [struct.pack(">q", pid)], [a.fileno()])
        a.close()


# ------------------------------------------------------------------------------------------ driver


def _mirror(name, message):
    """The exception the driver raises for one the solution raised."""
    cls = getattr(builtins, name, None) if name not in _NOT_MIRRORED else None
    if isinstance(cls, type) and issubclass(cls, Exception):
        with contextlib.suppress(BaseException):
            return cls(message)
    return SolutionError(message)


class Remote:
    """A solution-side object in the driver: a global of the solution, or an object a call returned.

    It can be called, iterated and its attributes read (each a message to the worker); it has no truth
    value and equals only itself, so a test can never mistake it for the plain value it expects.
    """

    __slots__ = ("_gen", "_label", "_link", "_target")

    def __init__(self, link, target, label, gen=None):
        self._link, self._target, self._label, self._gen = link, target, label, gen

    def __call__(self, *args, **kwargs):
        return self._link.request(self, "call", args=args, kwargs=kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._link.request(self, "getattr", name=name)

    def __iter__(self):
        return iter(self._link.request(self, "iter"))

    def __bool__(self):
        raise TypeError(f"{self._label} is not plain data and has no truth value here")

    def __repr__(self):
        return f"<solution {self._label}>"


class _Link:
    """The driver's end of the current test's worker."""

    def __init__(self):
        self.sock = None
        self.gen = 0
        self.deadline = None

    def request(self, remote, op, args=(), kwargs=None, name=None):
        if self.sock is None:
            raise SolutionGone("no solution process is running")
        if remote._gen is not None and remote._gen != self.gen:
            raise SolutionError(f"{remote._label} belongs to an earlier test")

        def ref_out(value):
            if isinstance(value, Remote) and value._gen == self.gen and value._target[0] == "r":
                return ["r", value._target[1], value._label]
            raise Unencodable(f"cannot pass a {type(value).__name__} to the solution")

        message = {"op": op, "t": remote._target}
        if op == "call":
            message["a"] = [encode(a, ref_out) for a in args]
            message["k"] = [[str(k), encode(v, ref_out)] for k, v in (kwargs or {}).items()]
        else:
            message["n"] = name
        try:
            send_frame(self.sock, message)
        except OSError:
            raise SolutionGone("the solution's process exited or crashed") from None
        reply = recv_frame(self.sock, self.deadline)
        if type(reply) is not dict:
            raise SolutionGone("the solution's process sent a malformed reply")
        if "e" in reply:
            raise _mirror(str(reply.get("e"))[:80], str(reply.get("m", ""))[:_REASON_CHARS])
        gen = self.gen

        def ref_in(ref_id, type_name):
            return Remote(self, ["r", ref_id], f"{type_name} object", gen)

        try:
            return decode(reply.get("v"), ref_in)
        except BadReply as exc:
            raise SolutionGone(f"the solution's process sent a malformed reply ({exc})") from None


class Harness:
    """The driver: forks the zygote on construction (no tests exist yet), runs the tests in ``run``."""

    def __init__(self, setup_src, solution_src, boot_timeout, preload=()):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
        # Everything the driver will import happens now, before any solution code exists in a process: a
        # worker that managed to write a module onto the import path could not get it run by the driver.
        self.base = {"__name__": "__test__", "__builtins__": builtins}
        self.setup_error = None
        try:
            exec(compile(setup_src, "<setup>", "exec"), self.base)
        except BaseException as exc:
            self.setup_error = f"the task's setup code failed in the harness: {_describe(exc)}"
        for module in preload:
            with contextlib.suppress(BaseException):
                __import__(module)
        self.zsock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the zygote
            try:
                self.zsock.close()
                _zygote_main(theirs, setup_src, solution_src)
            finally:
                os._exit(0)
        theirs.close()
        self.zsock.settimeout(boot_timeout)
        try:
            hello = json.loads(self.zsock.recv(1 << 16))
            self.load_error = None if hello.get("ok") else str(hello.get("error", "?"))[:_REASON_CHARS]
        except (OSError, ValueError, AttributeError):
            self.load_error = "compiling the solution failed or took too long"
        self.link = _Link()

    # -- one worker per test

    def _spawn(self):
        """A fresh worker from the zygote (pid, socket), within ``SPAWN_TIMEOUT``: not on the test's clock."""
        self.zsock.settimeout(SPAWN_TIMEOUT)
        try:
            self.zsock.send(b"spawn")
            msg, fds, _, _ = socket.recv_fds(self.zsock, 64, 1)
        except TimeoutError:
            raise SolutionGone(f"could not start the solution's process within {SPAWN_TIMEOUT:g} s") from None
        except OSError as exc:
            raise SolutionGone(f"could not start the solution's process ({exc})") from None
        if len(msg) != 8 or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise SolutionGone("could not start the solution's process")
        (pid,) = struct.unpack(">q", msg)
        return pid, socket.socket(fileno=fds[0])

    @staticmethod
    def _kill(pid, sock):
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            sock.close()

    def _run_one(self, test, base, timeout):
        """(passed, reason, solution seconds) of one test; raises ``_Starved`` when it cannot be timed.

        The test's ``timeout`` is the solution's time (``ProgramClock``): its clock starts once the worker
        exists (compiling the test and forking the worker come first, outside it) and covers the solution's
        load (its top-level code) and every call. The driver's own timer enforces it, looking at the clock
        whenever the limit could have been reached; the worker cannot touch either.
        """
        clock: list[ProgramClock | None] = [None]

        def on_alarm(signum, frame):
            if clock[0] is None:
                return
            wait = clock[0].next_check()
            if wait <= 0:
                raise _TestTimeout()
            signal.setitimer(signal.ITIMER_REAL, wait)

        signal.signal(signal.SIGALRM, on_alarm)
        worker = None
        try:
            try:
                code = compile(test["src"], "<test>", "exec")
                worker = self._spawn()
                # the solution's clock starts here; the driver's waits for a CPU are not its time either
                waiters = (f"/proc/{worker[0]}/schedstat", "/proc/thread-self/schedstat")
                clock[0] = started = ProgramClock(worker[0], timeout, waiters)
                signal.setitimer(signal.ITIMER_REAL, timeout)
                hello = recv_frame(worker[1], started.cap)
                if type(hello) is not dict or hello.get("ready") is not True:
                    error = hello.get("error") if type(hello) is dict else None
                    reason = f"the solution failed to load: {str(error)[:_REASON_CHARS]}"
                    return False, reason, self._used(clock[0])
                link = self.link
                link.sock, link.gen, link.deadline = worker[1], link.gen + 1, started.cap
                ns = dict(base)
                for name in test.get("proxy", ()):
                    ns[name] = Remote(link, ["g", name], name)
                for name, module in test.get("modules", ()):
                    ns[name] = __import__(module, fromlist=["_"])
                exec(code, ns)
                return True, "", self._used(clock[0])
            except _TestTimeout:
                raise
            except AssertionError as exc:
                message = _message(exc)
                return False, "assertion failed" + (f": {message}" if message else ""), self._used(clock[0])
            except SyntaxError as exc:
                return False, f"the test does not compile: {_describe(exc)}", 0.0
            except BaseException as exc:
                return False, _describe(exc), self._used(clock[0])
        except _TestTimeout:  # here too when the timer fires while an outcome is being recorded
            signal.setitimer(signal.ITIMER_REAL, 0)
            starved = clock[0].starved() if clock[0] is not None else None
            if starved:
                raise _Starved(f"not timed: {starved}") from None
            return False, f"timed out after {timeout:g} s", max(timeout, self._used(clock[0]))
        finally:
            clock[0] = None
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.link.sock = None
            if worker is not None:
                self._kill(*worker)

    @staticmethod
    def _used(clock):
        return clock.used(scan=False)[0] if clock is not None else 0.0

    def run(self, spec):
        """Run every test; write ``<nonce> <json>`` per test and a final ``done`` line to fd 1."""
        nonce = spec["nonce"]

        def emit(record):
            line = f"{nonce} {json.dumps(record, ensure_ascii=True)}\n".encode()
            with contextlib.suppress(OSError):
                os.write(1, line)

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a worker may signal us; only SIGALRM is handled
        base, setup_error = self.base, self.setup_error
        entry = spec.get("entry_point")
        if entry:
            base[entry] = base["candidate"] = Remote(self.link, ["g", entry], entry)
        # the total budget is the solution's time summed over the tests, each on its own clock; the wall clock
        # only bounds a run that a busy machine starves (its tests are then not timed: the sandbox's error)
        total = spec["total_timeout"]
        spent, wall_cap = 0.0, time.monotonic() + total * STARVED_FACTOR
        for i, test in enumerate(spec["tests"]):
            record: dict[str, object] = {"i": i, "passed": False}
            if setup_error or self.load_error:
                reason = setup_error or f"the solution does not compile: {self.load_error}"
            elif total - spent <= 0:
                reason = f"not run: the total budget of {total:g} s is used up"
            elif time.monotonic() >= wall_cap:
                reason, record["starved"] = "not timed: the machine is too busy", True
            else:
                try:
                    limit = min(spec["timeout"], total - spent)
                    record["passed"], reason, used = self._run_one(test, base, limit)
                    spent += used
                except _Starved as exc:
                    reason, record["starved"] = str(exc), True
            record["reason"] = reason[:_REASON_CHARS]
            emit(record)
        emit({"done": len(spec["tests"])})
        with contextlib.suppress(OSError):
            self.zsock.close()

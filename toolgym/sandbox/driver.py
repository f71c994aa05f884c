"""Driver code for sandbox sessions and children that run commands: the shell tool's and the judges'.

It runs inside a sandbox child (a session's interpreter, or a judge's fresh child), defined there by the
trusted side before any command of the model's runs, and is shared by the shell tool's driver program
(``toolgym.sandbox.shell_driver``, built on this) and the judges that run tests in a fresh child (SWE-v0's,
``toolgym.sandbox.judge_driver``):
``_tg_guard`` makes the driver's
process undumpable (same-uid commands cannot read its memory or descriptors) and the reaper of orphans, and
``_tg_kill_all`` kills every process the commands started, daemons included, so none outlives a call or
touches a judged tree; ``_tg_unpack`` unpacks a repository's archive. On the trusted side, ``define_once``
sends driver code to a session and ``last_json`` reads a driver call's reply.
"""

import base64
import json
import marshal

PROCESS_DRIVER = r'''
import base64 as _b64, json as _json, os as _os, select as _select, subprocess as _sp, time as _time

_tg_guarded = []

def _tg_guard():
    """Once per process (both settings last): refuse what a failed step would silently weaken."""
    if _tg_guarded:
        return
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # PR_SET_DUMPABLE 0: same-uid commands cannot open /proc/<this>/fd or mem
    # PR_SET_CHILD_SUBREAPER: orphans (daemons) become our children, so _tg_kill_all finds them
    for option, value, what in ((4, 0, "PR_SET_DUMPABLE"), (36, 1, "PR_SET_CHILD_SUBREAPER")):
        if libc.prctl(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({what}) failed")
    _tg_guarded.append(True)

def _tg_kill_all():
    """Kill every process the commands started, then reap them."""
    me = _os.getpid()
    for _ in range(2000):
        if me == 1:  # our own pid namespace: kill(-1) reaches exactly the commands' processes
            try:
                _os.kill(-1, 9)
            except OSError:
                pass
        else:
            kids = {}
            for entry in _os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        with open(f"/proc/{entry}/stat", "rb") as fh:
                            ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
                    except (OSError, ValueError, IndexError):
                        continue
                    kids.setdefault(ppid, []).append(int(entry))
            stack, seen = [me], set()
            while stack:
                for kid in kids.get(stack.pop(), ()):
                    if kid not in seen:
                        seen.add(kid)
                        stack.append(kid)
                        try:
                            _os.kill(kid, 9)
                        except OSError:
                            pass
        try:
            while _os.waitpid(-1, _os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        _time.sleep(0.001)

def _tg_unpack(archive, ws):
    # a tar the trusted side sent (a repository, modes and links kept) unpacked into ws, then removed; the
    # system's tar is several times faster than tarfile on a repository's thousands of files
    _os.makedirs(ws, exist_ok=True)
    try:
        _sp.run(["tar", "-xf", archive, "-C", ws, "--no-same-owner"], check=True, capture_output=True)
    except (OSError, _sp.CalledProcessError):
        import tarfile
        with tarfile.open(archive) as tar:
            try:
                tar.extractall(ws, filter="tar")
            except TypeError:  # Pythons before 3.11.4 have no extraction filters (the archive is ours)
                tar.extractall(ws)
    _os.remove(archive)
'''


def last_json(stdout: str) -> dict | None:
    """The JSON object a driver call printed as its last line (None: it printed none)."""
    line = stdout.rstrip("\n").rsplit("\n", 1)[-1]
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def define_once(source: str, name: str, marker: str) -> str:
    """Code that defines ``source`` in a session's globals unless ``marker`` is defined already, from code
    compiled here, once: the sandbox runs this same interpreter, and unmarshalling costs far less than
    compiling on every call."""
    code = base64.b64encode(marshal.dumps(compile(source, name, "exec"))).decode()
    return (
        f"if {marker!r} not in globals():\n"
        "    import marshal as _tg_m, base64 as _tg_b\n"
        f"    exec(_tg_m.loads(_tg_b.b64decode({code!r})))"
    )

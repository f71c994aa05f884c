"""Driver code for sandbox sessions and children that run commands: the shell tool's and the judges'.

It runs inside a sandbox child (a session's interpreter, or a judge's fresh child), defined there by the
trusted side before any command of the model's runs, and is shared by ``toolgym.tools.bash`` (the shell and
its workspace) and the judges that run tests in a fresh child (SWE-v0's): ``_tg_guard`` makes the driver's
process undumpable (same-uid commands cannot read its memory or descriptors) and the reaper of orphans, and
``_tg_kill_all`` kills every process the commands started, daemons included, so none outlives a call or
touches a judged tree.
"""

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

'''

"""The bash tool's driver program: what runs in its sandbox session's interpreter, around the commands.

``toolgym.tools.bash`` sends it to the session once (``SHELL_DEFINE``) and then calls its functions, with the
workspace's path as ``ws``: ``_tg_ready`` unpacks the task's archive and records what the workspace started
with, ``_tg_call`` runs one command under ``bash -c`` (output capped head and tail, a wall-clock timeout,
every process it started killed afterwards), ``_tg_snapshot`` and ``_tg_changes`` read the workspace back
(all of it, or what the commands changed) into a JSON reply that ``_tg_chunk`` hands out in pieces. The
Harbor runner (``toolgym.envs.terminal_harbor``) defines it in the child that runs a task's tests too.

It is built on ``PROCESS_DRIVER`` (``toolgym.sandbox.driver``: the guard, the reaper, the archive unpack),
which the judges share. The model's command never sees this code or its descriptors.
"""

from toolgym.sandbox.driver import PROCESS_DRIVER, define_once

SHELL_DRIVER = (
    PROCESS_DRIVER
    + r'''
def _tg_manifest(ws):
    """What the workspace holds, less git's own directory: {path: [kind, mode, stamp]}. The stamp is the
    inode, size, mtime and ctime: any write, rename or chmod changes the ctime, which no command can set
    back, so an unchanged stamp is an unchanged file (and reading no contents keeps this cheap)."""
    out = {}
    for root, dirs, files in _os.walk(ws):
        if root == ws and ".git" in dirs:
            dirs.remove(".git")
        rel_root = _os.path.relpath(root, ws)
        for name in files + [d for d in dirs if _os.path.islink(_os.path.join(root, d))]:
            path = _os.path.join(root, name)
            rel = name if rel_root == "." else rel_root + "/" + name
            st = _os.lstat(path)
            if _os.path.islink(path):
                out[rel] = ["link", 0o777, _os.readlink(path)]
            else:
                kind = "file" if _os.path.isfile(path) else "other"
                stamp = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
                out[rel] = [kind, st.st_mode & 0o7777, stamp]
    return out

def _tg_ready(ws, archive):
    """Once per session, before anything else: the workspace exists, the task's archive (a whole repository,
    modes and links kept) is unpacked into it, and what it started with is recorded for _tg_changes."""
    if "_tg_base" in globals():
        return
    _os.makedirs(ws, exist_ok=True)
    if archive and _os.path.exists(archive):
        _tg_unpack(archive, ws)
    globals()["_tg_base"] = _tg_manifest(ws)

def _tg_changes(ws, limit):
    """What the commands changed since the session started (git's directory aside), after every process
    they left is killed: [path, kind, mode, data] per changed or new entry, kind "deleted" for removed."""
    _tg_kill_all()
    now, base, out, size = _tg_manifest(ws), globals().get("_tg_base", {}), [], 0
    for rel in sorted(set(now) | set(base)):
        if now.get(rel) == base.get(rel):
            continue
        if rel not in now:
            out.append([rel, "deleted", 0, ""])
            continue
        kind, mode, info = now[rel]
        if kind == "file":
            size += _os.lstat(_os.path.join(ws, rel)).st_size
            if size > limit:
                print(_json.dumps({"too_large": f"the changed files hold more than {limit} bytes"}))
                return
            with open(_os.path.join(ws, rel), "rb") as fh:
                info = _b64.b64encode(fh.read()).decode()
        out.append([rel, kind, mode, info])
    global _tg_snap
    _tg_snap = _json.dumps({"entries": out})
    print(_json.dumps({"size": len(_tg_snap)}))

def _tg_call(cmd, ws, shown, timeout, cap, path_prefix=""):
    _tg_guard()
    env = dict(_os.environ, PWD=shown, HOME=ws)
    # where the workspace is, for an environment whose install points there (toolgym.swe.environments)
    env["TOOLGYM_TESTBED"] = _os.path.abspath(shown)
    if path_prefix:  # the task's interpreter first (a repository's own venv)
        env["PATH"] = path_prefix + ":" + env["PATH"]
    r, w = _os.pipe()
    try:
        proc = _sp.Popen(["bash", "-c", cmd], stdin=_sp.DEVNULL, stdout=w, stderr=w, cwd=shown, env=env,
                         start_new_session=True)
    except (OSError, ValueError) as exc:
        _os.close(r)
        _os.close(w)
        print(_json.dumps({"start_error": str(exc)}))
        return
    _os.close(w)
    head, tail, total, half = bytearray(), bytearray(), 0, cap // 2
    deadline = _time.monotonic() + timeout
    timed_out = eof = False
    while not eof:
        left = deadline - _time.monotonic()
        if left <= 0:
            timed_out = True
            break
        done = proc.poll() is not None
        ready = _select.select([r], [], [], 0 if done else min(left, 0.05))[0]
        if not ready:
            if done:
                break  # exited; what is still holding the pipe is a background process, killed below
            continue
        chunk = _os.read(r, 65536)
        if not chunk:
            eof = True
            break
        total += len(chunk)
        room = half - len(head)
        if room > 0:
            head += chunk[:room]
            chunk = chunk[room:]
        tail += chunk
        if len(tail) > half:
            del tail[: len(tail) - half]
    code = proc.poll()
    if code is None and not timed_out:  # output ended (EOF) just before bash exited
        try:
            code = proc.wait(max(deadline - _time.monotonic(), 0))
        except _sp.TimeoutExpired:
            timed_out = True
    _tg_kill_all()
    _os.close(r)
    print(_json.dumps({
        "exit": -1 if code is None else code, "timed_out": timed_out, "total": total,
        "head": head.decode("utf-8", "replace"), "tail": tail.decode("utf-8", "replace"),
        "cut": total - len(head) - len(tail),
    }))

def _tg_snapshot(ws, limit):
    """The workspace: [path, kind, mode, data] per entry; symlinks are read as links, never followed."""
    _tg_kill_all()
    out, size = [], 0
    for root, dirs, files in _os.walk(ws):
        dirs.sort()
        rel_root = _os.path.relpath(root, ws)
        for name in dirs + sorted(files):
            path = _os.path.join(root, name)
            rel = name if rel_root == "." else rel_root + "/" + name
            st = _os.lstat(path)
            mode = st.st_mode & 0o7777
            if _os.path.islink(path):
                out.append([rel, "link", mode, _os.readlink(path)])
            elif name in dirs:
                out.append([rel, "dir", mode, ""])
            elif _os.path.isfile(path):
                size += st.st_size
                if size > limit:
                    print(_json.dumps({"too_large": f"the workspace holds more than {limit} bytes"}))
                    return
                try:
                    with open(path, "rb") as fh:
                        data = _b64.b64encode(fh.read()).decode()
                except OSError as exc:
                    data = None
                    out.append([rel, "unreadable", mode, str(exc)])
                    continue
                out.append([rel, "file", mode, data])
            else:
                out.append([rel, "other", mode, ""])
    global _tg_snap
    _tg_snap = _json.dumps({"entries": out})
    print(_json.dumps({"size": len(_tg_snap)}))

def _tg_chunk(start, size):
    print(_tg_snap[start : start + size])
'''
)

#: defines the driver in a session, once (its first call, or the first after a restart)
SHELL_DEFINE = define_once(SHELL_DRIVER, "<bash-driver>", "_tg_snapshot")

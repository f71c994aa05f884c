"""The sandbox where people train: a container's root, cluster users, any Python layout (issue: Docker/K8s).

Each setup is simulated from a root test run in a fresh process, with nothing re-exposed that the real
case would not see:

- **Docker-like**: root with Docker's default capabilities (no CAP_SYS_ADMIN: no namespace can be made),
  through ``setpriv``; the interpreter is this test run's own (here under the 0700 ``/root``);
- **an interpreter under a 0700 directory**: the base Python bound into a ``0700`` tmpfs and a venv made
  from it there, then the Docker-like capabilities (so this holds on a machine whose Python is in /usr);
- **a cluster user with user namespaces**, and **one without** (refused by a seccomp filter, as in a pod):
  a uid of its own (``USER_UID``) running a venv of its own made from a base Python that user can read
  (where this machine's Python, packages or checkout lie under a 0700 directory such as ``/root`` or a
  ``mktemp -d`` clone, just those paths are made readable, at their own place: nothing else of that
  directory and nothing of the sandbox's view);
- **a venv reached through a symlink** (``link -> .venv``), with every layer.

Each runs the containment battery (no write outside the run's dir, no host secret, no signal to the
host, no TCP connect) and an honest numpy solution through the code verifier (1.0); the two setups without
namespaces, where Landlock is the filesystem wall (Docker-like, and a user without user namespaces), also run
the whole red-team suite (``tests/security/test_red_team.py``). A sandbox whose
child cannot import its packages is *broken*: verdicts are errors and the python tool answers infra_error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="simulating other users and containers needs root")

PROJECT = Path(__file__).resolve().parents[2]
DOCKER_CAPS = (
    "-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,+net_bind_service,+net_raw,"
    "+sys_chroot,+mknod,+audit_write,+setfcap"
)
SETPRIV = ["setpriv", "--inh-caps=-all", f"--bounding-set={DOCKER_CAPS}"]
#: the simulated cluster user: a uid of this test process's own, not 65534 shared with every other run. Its
#: process cap (RLIMIT_NPROC) counts every process of that uid on the machine: where two suites run side by
#: side (CI's core suites on two Pythons), one's fork bomb would otherwise starve the other's sessions
USER_UID = 60_000 + os.getpid() % 5_000

# Root, fresh process: optionally mount a Python install somewhere (mode 0755 or 0700) and make a venv of
# it that sees this project's packages, then become the target user / capability set and exec the probe.
HELPER = textwrap.dedent(
    """
    import json, os, subprocess, sys, types
    cfg = json.loads(sys.argv[1])
    for name in ("toolgym", "toolgym.sandbox"):
        module = types.ModuleType(name)
        module.__path__ = [cfg["project"] + "/" + name.replace(".", "/")]
        sys.modules[name] = module
    from toolgym.sandbox import _linux as lx
    python = cfg["python"]
    if cfg.get("install"):
        lx.unshare(lx.CLONE_NEWNS)
        lx.mount(None, "/", None, lx.MS_REC | lx.MS_PRIVATE)
        lx.mount("tmpfs", "/mnt", "tmpfs", 0, "mode=0755")
        if cfg["install"] == "closed":  # the base Python moved under a dir only root may enter
            os.makedirs("/mnt/python")
            lx.mount(cfg["base"], "/mnt/python", None, lx.MS_BIND | lx.MS_REC)
            exe = "/mnt/python/bin/" + os.path.basename(cfg["base_exe"])
        else:  # what the user owns is readable to them, at its own path (a build may name it: rpath)
            hidden = {}
            for path in [cfg["base"], *cfg["site_paths"]]:
                parts = path.strip("/").split("/")
                for i in range(1, len(parts)):
                    ancestor = "/" + "/".join(parts[:i])
                    if not os.stat(ancestor).st_mode & 0o001:
                        hidden.setdefault(ancestor, []).append(path)
                        break
            for ancestor, paths in sorted(hidden.items(), key=lambda kv: -len(kv[0])):
                fds = {p: os.open(p, os.O_PATH) for p in paths}
                lx.mount("tmpfs", ancestor, "tmpfs", 0, "mode=0755")
                for p, fd in fds.items():
                    os.makedirs(p, exist_ok=True)
                    lx.mount(f"/proc/self/fd/{fd}", p, None, lx.MS_BIND | lx.MS_REC)
            exe = cfg["base_exe"]
        subprocess.run([exe, "-m", "venv", "--without-pip", "/mnt/venv"], check=True)
        where = "import sysconfig; print(sysconfig.get_path('purelib'))"
        site = subprocess.run(["/mnt/venv/bin/python", "-c", where], check=True, capture_output=True,
                              text=True).stdout.strip()
        with open(site + "/toolgym-test.pth", "w") as fh:
            fh.write("\\n".join(cfg["pth"]) + "\\n")
        if cfg["install"] == "closed":
            os.chmod("/mnt", 0o700)
        python = "/mnt/venv/bin/python"
    argv = [python, "-c", cfg["probe"], json.dumps(cfg["args"])]
    if cfg.get("pytest"):  # the red-team suite itself, run in this setup
        # a temp root of this run's own: pytest's default (/tmp/pytest-of-<user>) is "pytest-of-unknown" for a
        # uid without a name, shared by every such uid on the machine, and pytest refuses one it does not own;
        # random, not the pid alone: a run killed earlier leaves its root behind, and a reused pid then met
        # another uid's directory that pytest could neither clear nor create (FileExistsError)
        basetemp = f"/tmp/toolgym-setup-{os.getpid()}-{os.urandom(6).hex()}"
        argv = [python, "-m", "pytest", f"--basetemp={basetemp}", *cfg["pytest"]]
        os.chdir(cfg["project"])
    if cfg.get("user"):
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(cfg["user"], cfg["user"], cfg["user"])
    if cfg["args"].get("block_userns"):  # what a pod's seccomp profile does to unshare(CLONE_NEWUSER)
        import errno, pyseccomp as sc  # (a filter survives exec: the probe or pytest runs under it)
        flt = sc.SyscallFilter(sc.ALLOW)
        for call in ("unshare", "clone"):
            flt.add_rule(sc.ERRNO(errno.EPERM), call, sc.Arg(0, sc.MASKED_EQ, 0x10000000, 0x10000000))
        flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        flt.load()
    if cfg.get("docker"):
        argv = cfg["setpriv"] + argv
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "OPENAI_API_KEY": cfg["secret"], **cfg["env"]}
    os.execvpe(argv[0], argv, env)
    """
)

PROBE = textwrap.dedent(
    """
    import json, logging, os, socket, sys, uuid
    args = json.loads(sys.argv[1])
    logging.disable(logging.CRITICAL)
    from toolgym.core.task import Task
    from toolgym.rewards.code import CodeTestsVerifier
    from toolgym.sandbox import Limits, LocalSandbox
    from toolgym.tools.python import PythonTool
    out = {"uid": os.getuid(), "prefix": sys.prefix}
    sb = LocalSandbox(workers=1, limits=Limits(timeout_s=10), disable=args.get("disable", ()))
    out.update(mode=sb.isolation.details["mode"], active=list(sb.isolation.active),
               missing=sorted(sb.isolation.missing), broken=sb.broken or "")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    marker = "toolgym-setup-" + uuid.uuid4().hex[:10]
    targets = ["/", "/etc", "/usr", "/var/tmp", "/tmp", "/dev/shm", sys.prefix, sys.base_prefix,
               os.path.dirname(os.__file__), args["project"]]
    battery = f'''
    import json, os, socket
    r = {{"wrote": []}}
    for d in {targets!r}:
        try:
            open(os.path.join(d, {marker!r}), "w").write("x")
            r["wrote"].append(d)
        except OSError:
            pass
    def attempt(name, fn):
        try:
            fn()
            r[name] = "ALLOWED"
        except OSError:
            r[name] = "refused"
    attempt("shadow", lambda: open("/etc/shadow").read())
    attempt("environ", lambda: open("/proc/{os.getpid()}/environ", "rb").read())
    attempt("signal", lambda: os.kill({os.getpid()}, 0))
    attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {listener.getsockname()[1]}), 1))
    open("own-file", "w").write("inside is fine")
    r["own"] = open("own-file").read()
    print(json.dumps(r))
    '''
    res = sb.run(battery)
    failed = {"status": res.status, "err": res.stderr[-300:], "detail": res.detail}
    out["battery"] = json.loads(res.stdout) if res.status == "ok" else failed
    out["planted"] = [d for d in targets if os.path.exists(os.path.join(d, marker))]
    task = Task(id="add", prompt="", data={"tests": ["assert add(1, 2) == 3", "assert add(20, 22) == 42"]})
    honest = "import numpy as np\\ndef add(a, b):\\n    return int(np.add(a, b))\\n"
    verdict = CodeTestsVerifier(sandbox=sb, timeout=5.0).verify(task, honest)
    out["honest"] = [verdict.reward, verdict.error]
    tool = PythonTool(sandbox=sb)
    tool.start_episode("e")
    observation = tool.run(PythonTool.Args(code="import numpy; print(numpy.add(1, 2))"))
    out["tool"] = [observation.status, observation.output[:120]]
    tool.end_episode("e")
    from toolgym.tools.bash import BashTool
    shell = BashTool(sandbox=sb, timeout=5)
    shell.bind_task(Task(id="w", prompt="", data={"files": {"in.txt": "a b c\\n"}}))
    # (without a pid namespace the host's processes are listed too, this probe's own command line included:
    # look for this call's own sleep only, a name no command line here spells out)
    first = shell.run(BashTool.Args(command="wc -w < in.txt > n.txt; (sleep 61.$((6+1)) &); echo started"))
    second = shell.run(BashTool.Args(command="cat n.txt; pgrep -fc 'sleep 61[.]7'"))
    fs_as_root = "file access as uid 0" in sb.isolation.details.get("unprivileged_user", "")
    out["bash"] = [first.status, first.output[:400], second.output[:400], fs_as_root]
    shell.close()
    sb.close()
    # a loopback network of the run's own where namespaces are allowed, else no socket at all (and saying so)
    net = LocalSandbox(workers=1, limits=Limits(timeout_s=10), network="loopback")
    network = f'''
    import json, socket
    r = {{}}
    def attempt(name, fn):
        try:
            fn()
            r[name] = "ALLOWED"
        except OSError as exc:
            r[name] = type(exc).__name__
    def own():
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
        socket.create_connection(server.getsockname(), 1).sendall(b"x")
        assert server.accept()[0].recv(1) == b"x"
    attempt("own", own)
    attempt("host", lambda: socket.create_connection(("127.0.0.1", {listener.getsockname()[1]}), 1))
    attempt("outside", lambda: socket.create_connection(("10.255.255.1", 80), 1))
    attempt("unix", lambda: socket.socket(socket.AF_UNIX))
    print(json.dumps(r))
    '''
    res = net.run(network)
    out["loopback"] = {"active": "loopback_network" in net.isolation.active,
                       "missing": net.isolation.missing.get("loopback_network", ""),
                       "battery": json.loads(res.stdout) if res.status == "ok" else res.stderr[-300:]}
    net.close()
    print("RESULT " + json.dumps(out))
    """
)

SECRET = "sk-toolgym-setup-secret"


def run_setup(*, docker=False, install=None, user=False, python=None, pytest_args=None, env=None, **args):
    base = os.path.realpath(sys.base_prefix)
    site = [p for p in sys.path if p.endswith("site-packages")]
    # the new venv sees this one's packages as this one does: its site dirs, then what their .pth files say
    # (the editable install's finder included, so the project itself is not put on sys.path)
    pth = [line for d in site for line in [d, *_pth_lines(d)]]
    cfg = {
        "project": str(PROJECT),
        "python": python or sys.executable,
        "install": install,
        "base": base,
        "base_exe": os.path.realpath(sys.executable),
        "site_paths": [*site, str(PROJECT)],
        "pth": pth,
        "user": USER_UID if user else None,
        "docker": docker,
        "setpriv": SETPRIV,
        "secret": SECRET,
        "probe": PROBE,
        "args": {"project": str(PROJECT), **args},
        "pytest": pytest_args,
        "env": env or {},  # variables the setup's process gets beside PATH and HOME
    }
    proc = subprocess.run(
        [sys.executable, "-I", "-c", HELPER, json.dumps(cfg)], capture_output=True, text=True, timeout=600
    )
    if pytest_args:
        return proc
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, f"probe failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(line[len("RESULT ") :])


def _pth_lines(site_dir: str) -> list[str]:
    lines = []
    for name in sorted(os.listdir(site_dir)):
        if name.endswith(".pth"):
            with open(os.path.join(site_dir, name)) as fh:
                lines += [line.rstrip("\n") for line in fh if line.strip() and not line.startswith("#")]
    return lines


def assert_contained_and_honest(out: dict) -> None:
    battery = out["battery"]
    assert out["broken"] == "", out["broken"]
    # with the view, /tmp (and what lies beneath it, a checkout there included) and /dev/shm are the run's
    # own tmpfs: a write lands there and vanishes; what matters is that nothing reached the host (planted)
    wrote = battery.get("wrote", ["?"])
    if "fs_view" in out["active"]:
        wrote = [d for d in wrote if not (d in ("/tmp", "/dev/shm") or d.startswith("/tmp/"))]
    assert wrote == [] and out["planted"] == [], out
    assert {k: battery[k] for k in ("shadow", "environ", "signal", "tcp")} == dict.fromkeys(
        ("shadow", "environ", "signal", "tcp"), "refused"
    ), battery
    assert battery["own"] == "inside is fine"
    assert out["honest"] == [1.0, None], out["honest"]  # an honest numpy solution scores 1.0
    assert out["tool"] == ["ok", "3"], out["tool"]
    # the bash tool keeps its workspace and kills what a call left running, or refuses loudly where a
    # command could not write the workspace (children reading files as uid 0, without the view)
    status, first, second, fs_as_root = out["bash"]
    if fs_as_root and "fs_view" not in out["active"]:
        assert status == "infra_error" and "could not write the workspace" in first, out["bash"]
    else:
        assert (status, first, second) == ("ok", "started\n[exit code 0]", "3\n0\n[exit code 1]"), out["bash"]


def assert_loopback(out: dict, *, available: bool) -> None:
    """``network="loopback"``: a run serves and connects on its own 127.0.0.1, never reaches the host's
    listener on 127.0.0.1 and times out beyond; opens no unix socket. Where the namespaces are not allowed:
    no socket at all, and ``missing`` says so."""
    loopback = out["loopback"]
    if available:
        assert loopback["active"] and loopback["missing"] == "", loopback
        expected = {"own": "ALLOWED", "host": "ConnectionRefusedError", "outside": "TimeoutError"}
    else:
        assert not loopback["active"] and "the runs have no network at all" in loopback["missing"], loopback
        expected = dict.fromkeys(("own", "host", "outside"), "PermissionError")
    assert loopback["battery"] == {**expected, "unix": "PermissionError"}, loopback


def test_docker_like_root_without_cap_sys_admin():
    out = run_setup(docker=True)
    assert out["uid"] == 0 and out["mode"] == "root"
    assert {"fs_view", "pid_namespace", "net_namespace"} <= set(out["missing"])
    assert {"landlock", "unprivileged_user", "seccomp", "no_new_privs"} <= set(out["active"])
    assert_contained_and_honest(out)
    assert_loopback(out, available=False)


def test_interpreter_under_a_0700_directory_in_a_container():
    out = run_setup(docker=True, install="closed")
    assert out["prefix"] == "/mnt/venv" and "landlock" in out["active"]
    assert_contained_and_honest(out)


def test_cluster_user_with_user_namespaces():
    out = run_setup(user=True, install="open")
    assert out["uid"] == USER_UID and out["mode"] == "userns" and out["missing"] == []
    assert_contained_and_honest(out)
    assert_loopback(out, available=True)


def test_cluster_user_without_user_namespaces():
    out = run_setup(user=True, install="open", block_userns=True)
    assert out["uid"] == USER_UID and out["mode"] == "plain"
    assert "fs_view" in out["missing"] and "landlock" in out["active"]
    assert_contained_and_honest(out)
    assert_loopback(out, available=False)


def test_venv_reached_through_a_symlink(tmp_path):
    link = tmp_path / "venv-link"
    link.symlink_to(Path(sys.prefix).resolve())
    out = run_setup(python=str(link / "bin" / "python"))
    assert out["prefix"] == str(link) and out["missing"] == []
    assert_contained_and_honest(out)
    assert_loopback(out, available=True)


def test_a_child_that_cannot_import_its_packages_makes_errors_not_zeros():
    """Without Landlock a container's sandbox uid cannot enter the 0700 dir: the canary says broken."""
    out = run_setup(docker=True, install="closed", disable=["landlock"])
    assert "cannot use its interpreter" in out["broken"]
    assert "sandbox_error" in out["honest"][1]  # a verdict error, not a plain 0
    assert out["tool"][0] == "infra_error" and "broken" in out["tool"][1]


def assert_suite_passes(proc: subprocess.CompletedProcess) -> None:
    """A pytest run in a setup passed: exit 0, and its summary counts passes and no failure."""
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0 and " passed" in summary and "failed" not in summary, (
        proc.stdout[-4000:] + proc.stderr[-2000:]
    )


RED_TEAM = [
    "tests/security/test_red_team.py",
    "tests/security/test_sql_hostile.py",
    "-q",
    "-n",
    "0",
    "-p",
    "no:cacheprovider",
    "-W",
    "ignore",
]


#: the whole red-team suites rerun in a setup (a minute and a half of CPU in all) run once per CI, in the main
#: suite: the attacks are on the kernel's walls (Landlock, seccomp, rlimits), whatever the Python. On the
#: other Pythons (`make test-core`) the suites themselves run, and so do the setups' own checks above (that
#: interpreter works in each setup, is contained, and scores honest code 1.0).
@pytest.mark.main_suite_only
@pytest.mark.parametrize(
    "setup",
    [
        pytest.param({"docker": True}, id="docker-like"),
        pytest.param({"user": True, "install": "open", "block_userns": True}, id="user-without-userns"),
    ],
)
def test_the_red_team_suite_in_the_setups_without_namespaces(setup):
    """The whole red-team suite where the filesystem wall is Landlock (no fs_view, no pid namespace)."""
    assert_suite_passes(run_setup(pytest_args=RED_TEAM, **setup))


@pytest.mark.main_suite_only
def test_the_shell_escapes_where_the_commands_run_as_the_trainers_own_user():
    """The bash tool's red-team suite where nothing but Landlock, seccomp and rlimits stand between the
    commands and the trainer: no namespace, the user's own uid (no pid namespace: the descendants are found
    by the subreaper, and a command can end its own session, which is then its failure). In the Docker-like
    setup on a machine whose interpreter lies under /root the tool refuses instead (checked above)."""
    args = ["tests/security/test_shell_escapes.py", *RED_TEAM[2:]]
    assert_suite_passes(run_setup(pytest_args=args, user=True, install="open", block_userns=True))


#: SWE-v0 where the sandbox has no view: the repository is the session's own directory (no /testbed), the
#: judge builds its tree in a fresh child's own directory, and Landlock, seccomp and rlimits are the walls.
#: The Docker-like root here runs a venv it can read (as in a container image, whose Python is not under a
#: 0700 /root); where it cannot, the bash tool refuses loudly (test_docker_like_root_without_cap_sys_admin).
SWE_SUITE = [
    "tests/security/test_swe_hacks.py",
    "tests/envs/test_swe_env.py",
    # (the hacks, gold and nothing, the history and the store out of sight, a judge that cannot run; the rest
    # of the env's tests, row formats and refusals, do not depend on the sandbox's layers)
    "-k",
    "hack or gold_patch or git_tree or cannot_run or own_interpreter",
    *RED_TEAM[2:],
]
#: and, in the Docker-like root, the whole in-process red team (tampering from inside the judge's test
#: process: no pid namespace there, so a fork that outlives the runner is visible, and /proc shows the
#: machine). The cluster user without user namespaces has the same missing layers with another uid, which the
#: seal inside the test process does not depend on: it would double the run's 100 s for nothing new.
SWE_SUITE_DOCKER = [
    "tests/security/test_swe_hacks.py",
    "tests/security/test_swe_in_process.py",
    "tests/envs/test_swe_env.py",
    "-k",
    "hack or gold_patch or git_tree or cannot_run or own_interpreter or tampering or seal or honest",
    *RED_TEAM[2:],
]


@pytest.mark.main_suite_only
@pytest.mark.parametrize(
    ("setup", "suite"),
    [
        pytest.param({"docker": True, "install": "open"}, SWE_SUITE_DOCKER, id="docker-like"),
        pytest.param(
            {"user": True, "install": "open", "block_userns": True}, SWE_SUITE, id="user-without-userns"
        ),
    ],
)
def test_swe_v0_plays_and_judges_without_namespaces(setup, suite):
    """Gold 1, nothing 0, every hack 0, no leak, refusals with reasons: SWE-v0's suites, in the setup."""
    assert_suite_passes(run_setup(pytest_args=suite, **setup))


#: SWE-v0's environments without namespaces: built with uv in the Docker-like root (its interpreter one it can
#: read, as in an image), the repository importing from the session's own directory (no /testbed), the C
#: extension rebuilt by the judge in its child's own directory, the history mined there too; the builds old
#: repositories need, the runners beyond pytest (Django's, SymPy's) with their hacks, and a verdict that is an
#: error where tests open sockets and no loopback network can be given
SWE_ENVS_SUITE = [
    "tests/swe/test_environments.py",
    "tests/swe/test_history.py",
    "tests/swe/test_old_builds.py",
    "tests/swe/test_runners.py",
    "tests/swe/test_judge_network.py",
    *RED_TEAM[2:],
]


@pytest.mark.main_suite_only
def test_swe_environments_build_play_and_mine_in_a_docker_like_root():
    # a container's package index settings: its CA bundle, and uv's cache (warm, as an image's would be)
    env = {k: v for k, v in os.environ.items() if k.startswith(("SSL_", "UV_", "PIP_INDEX", "PIP_CERT"))}
    cache = subprocess.run([sys.executable, "-m", "uv", "cache", "dir"], capture_output=True, text=True)
    env.setdefault("UV_CACHE_DIR", cache.stdout.strip())
    assert_suite_passes(run_setup(pytest_args=SWE_ENVS_SUITE, docker=True, install="open", env=env))

"""``ServerPlan``: what a fork server established once, and what every child must do (plain data, picklable).

``toolgym.sandbox.isolation`` makes it (``prepare_server``); ``toolgym.sandbox.child_setup`` and
``toolgym.sandbox.child`` follow it in each child. It runs inside the fork server, so it imports only the
standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ServerPlan:
    """What the fork server established once, and what every child must do. Plain data, picklable."""

    mode: str  # "root" (real root), "userns" (normal user with a user namespace), "plain" (neither)
    layers: set[str]
    missing: dict[str, str] = field(default_factory=dict)
    disabled: set[str] = field(default_factory=set)
    details: dict[str, str] = field(default_factory=dict)
    seccomp_bpf: bytes | None = None
    locked_in_server: bool = False  # no_new_privs and seccomp already in force in the server (inherited)
    pidns_fd: int = -1  # the server's own pid namespace, to restore pid_for_children after each fork
    host_tmp_base: str | None = None  # where per-run tmp dirs live when fs_view is missing
    tmp_binds: list[str] = field(default_factory=list)  # view paths under /tmp, re-bound in each run
    landlock_abi: int = 0
    landlock_read: list[str] = field(default_factory=list)  # what each child's domain may read
    fs_as_root: bool = False  # children keep file access as uid 0 (no capabilities): see unprivileged_user
    network: str = "none"  # "loopback": each run gets a network namespace with lo up (toolgym.sandbox.netns)

    def has(self, layer: str) -> bool:
        return layer in self.layers

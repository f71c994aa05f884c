"""``toolgym serve tools --ray``: the tool server as a Ray Serve deployment, replicated and autoscaled.

Each replica runs the very app ``toolgym serve tools`` runs (``toolgym.server.tools_app.create_app``, with
its admission limits, metrics and lifespan), built on the replica from the same :class:`ToolServerConfig`;
Ray Serve's proxy spreads requests over the replicas. ``--replicas N`` fixes their number;
``--min-replicas`` / ``--max-replicas`` let Serve's autoscaler follow the load (``target_ongoing_requests``
per replica).

State: a stateful tool (the python interpreter of a trajectory, ``?session_id=`` / verl-tool's
``trajectory_ids``) lives on the replica that created it, and Serve does not route by session, so with more
than one replica a trajectory's later calls may land on a replica that does not hold its state. Replicate
stateless tools (calculator, search) freely; keep one replica for stateful ones, or give each trainer node its
own tool server.

Where it runs: the Ray cluster at ``RAY_ADDRESS`` when it is set, else a local Ray instance started here
(with :data:`LOCAL_RAY_ENV`, unless the environment already sets those variables).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from toolgym.server.tools_api import ToolServerConfig
from toolgym.util.kwargs import positive_int

__all__ = [
    "LOCAL_RAY_ENV",
    "RayServeOptions",
    "ToolServerDeployment",
    "add_ray_arguments",
    "options_from_args",
    "serve_tools",
    "stateful_tools",
    "tools_application",
    "use_local_ray_env",
]

#: Serve's settings for a Ray instance started on this machine. Serve's controller gives its HTTP proxy
#: actor 5 s to report ready (then 10, 15, ...) and kills it past that, and ``serve.start`` waits on that
#: first actor, so it fails with ``ActorDiedError`` when starting the proxy's worker process takes longer:
#: on a busy two-core machine (CI's main suite beside it) it did. A minute is what ``serve.start`` itself
#: waits for the proxy.
LOCAL_RAY_ENV = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60"}


def use_local_ray_env() -> None:
    """Put :data:`LOCAL_RAY_ENV` in this process's environment (what the user set wins) before a local Ray
    instance starts: its raylet, and so Serve's controller, inherit it."""
    for name, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(name, value)


class RayServeOptions(BaseModel):
    """How many replicas, and what each reserves. Fixed ``replicas`` unless ``min_replicas``/``max_replicas``
    ask for autoscaling."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int = Field(1, ge=1)
    min_replicas: int | None = Field(None, ge=0)
    max_replicas: int | None = Field(None, ge=1)
    #: requests in flight per replica the autoscaler aims for; default half the app's ``max_concurrency``
    target_ongoing_requests: float | None = Field(None, gt=0)
    num_cpus: float = Field(1.0, ge=0)
    name: str = "toolgym-tools"

    @model_validator(mode="after")
    def _bounds(self) -> RayServeOptions:
        if self.autoscaling:
            low, high = self.min_replicas or 0, self.max_replicas or max(self.replicas, 1)
            if low > high:
                raise ValueError(f"--min-replicas {low} is more than --max-replicas {high}")
        return self

    @property
    def autoscaling(self) -> bool:
        return self.min_replicas is not None or self.max_replicas is not None


class ToolServerDeployment:
    """One replica: the tool server app built from the config on the replica (so nothing unpicklable — the
    sandbox, locks, the app itself — crosses from the driver). ``serve.ingress()`` wraps it when deployed,
    so importing this module does not import Ray."""

    def __init__(self, config: dict[str, Any]):
        self.config = ToolServerConfig.model_validate(config)

    def __serve_build_asgi_app__(self) -> Any:
        from toolgym.server.tools_app import create_app

        return create_app(self.config)


def add_ray_arguments(p: argparse.ArgumentParser) -> None:
    """``--ray`` and the replica flags, for ``toolgym serve tools``'s parser."""
    p.add_argument("--ray", action="store_true", help="deploy with Ray Serve (RAY_ADDRESS, or a local Ray)")
    p.add_argument("--replicas", type=positive_int, default=1, help="with --ray: replicas (default 1)")
    p.add_argument(
        "--min-replicas", type=positive_int, default=None, help="with --ray: autoscale down to this many"
    )
    p.add_argument(
        "--max-replicas", type=positive_int, default=None, help="with --ray: autoscale up to this many"
    )
    p.add_argument(
        "--target-ongoing-requests",
        type=float,
        default=None,
        help="with --ray and autoscaling: requests per replica to aim for (default max-concurrency/2)",
    )
    p.add_argument("--num-cpus", type=float, default=1.0, help="with --ray: CPUs each replica reserves")


def options_from_args(args: argparse.Namespace) -> RayServeOptions | None:
    """The Ray Serve options, or ``None`` without ``--ray`` (then the replica flags are refused)."""
    scaling = ("replicas", "min_replicas", "max_replicas", "target_ongoing_requests", "num_cpus")
    defaults = {"replicas": 1, "num_cpus": 1.0}
    if not args.ray:
        given = [f"--{k.replace('_', '-')}" for k in scaling if getattr(args, k) != defaults.get(k)]
        if given:
            raise ValueError(f"{', '.join(given)} need --ray (Ray Serve runs the replicas)")
        return None
    return RayServeOptions(**{k: getattr(args, k) for k in scaling})


def tools_application(config: ToolServerConfig, options: RayServeOptions | None = None) -> Any:
    """The Serve application (``Deployment.bind()``) for ``serve.run``."""
    from ray import serve

    options = options or RayServeOptions()
    # Serve holds requests beyond max_ongoing_requests in its router; the app's own admission queue (and its
    # 503 with Retry-After) then sees the same load a single server would
    settings: dict[str, Any] = {
        "name": options.name,
        "max_ongoing_requests": config.max_concurrency + config.max_queue,
        "ray_actor_options": {"num_cpus": options.num_cpus},
    }
    if options.autoscaling:
        high = options.max_replicas or max(options.replicas, 1)
        low = options.min_replicas if options.min_replicas is not None else min(options.replicas, high)
        target = options.target_ongoing_requests or max(1.0, config.max_concurrency / 2)
        settings["autoscaling_config"] = {
            "min_replicas": low,
            "initial_replicas": max(low, min(options.replicas, high)),
            "max_replicas": high,
            "target_ongoing_requests": target,
        }
    else:
        settings["num_replicas"] = options.replicas
    deployment = serve.deployment(serve.ingress()(ToolServerDeployment)).options(**settings)
    return deployment.bind(config.model_dump())


def serve_tools(
    config: ToolServerConfig, options: RayServeOptions, *, host: str, port: int, blocking: bool = True
) -> Any:
    """Connect to Ray (``RAY_ADDRESS``, or a local instance), start Serve's HTTP proxy on ``host:port`` and
    deploy the tool server; with ``blocking`` it serves until interrupted. Returns the app's handle."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init()
        else:
            use_local_ray_env()
            ray.init(include_dashboard=False)
    serve.start(http_options={"host": host, "port": port})
    handle = serve.run(tools_application(config, options), name=options.name, route_prefix="/")
    scale = (
        f"{options.min_replicas or 0}..{options.max_replicas or options.replicas} replicas (autoscaling)"
        if options.autoscaling
        else f"{options.replicas} replica(s)"
    )
    print(
        f"toolgym tools on Ray Serve: {', '.join(config.tools)}, {scale}; "
        f"verl-tool: tool_server_url=http://{host}:{port}/get_observation",
        file=sys.stderr,
        flush=True,
    )
    stateful = stateful_tools(config)
    if stateful and (options.max_replicas or options.replicas) > 1:
        print(
            f"warning: stateful tools ({', '.join(stateful)}) keep a trajectory's state on one replica, and "
            "Serve does not route by session: serve them with one replica (see toolgym.server.ray_serve)",
            file=sys.stderr,
            flush=True,
        )
    if blocking:
        _wait_until_interrupted()
    return handle


def stateful_tools(config: ToolServerConfig) -> list[str]:
    """The served tools that keep per-episode state (they override ``Tool``'s episode hooks)."""
    import toolgym  # noqa: F401 - registers the tools
    from toolgym.tools.base import TOOLS, Tool

    def stateful(factory: Any) -> bool:
        if not (isinstance(factory, type) and issubclass(factory, Tool)):
            return False
        return factory.start_episode is not Tool.start_episode or factory.end_episode is not Tool.end_episode

    return [name for name in config.tools if stateful(TOOLS.get(name))]


def _wait_until_interrupted() -> None:
    import time

    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        from ray import serve

        serve.shutdown()
        raise

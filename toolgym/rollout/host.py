"""The episode host: the one setup every trainer adapter and server runs episodes on.

Whatever drives the episodes (verl's agent loop, TRL's ``rollout_func`` or ``environment_factory``, the
OpenRLHF executor, SkyRL's generator, verifiers' env, the OpenEnv server, the agent endpoint, the
collector), it needs the same pieces, and they live here once:

- an :class:`~toolgym.rollout.pool.EnvPool` to lease envs from (each lease reserves a sandbox session slot);
- a thread pool for ``env.reset``/``env.step`` and tokenizing, so no event loop ever blocks on a tool;
- one :class:`~toolgym.rollout.chat.ChatRenderer` per tokenizer and template settings, its end-of-turn ids
  widened by the model's generation config (models often end turns with more than one EOS id);
- a bound on episodes in flight (``max_concurrent_episodes``), one semaphore per event loop;

It offers two ways in. **Token level**, :meth:`EpisodeHost.play`: the shared runner
(:func:`~toolgym.rollout.episode.run_episode`) plays a whole episode with an ``LLMClient`` and returns its
token-level Trajectory; ``toolgym.rollout.samples.trainer_sample`` then turns that into the tensors a
trainer's loss takes (and ``sampling_from`` maps a trainer's sampling settings to toolgym's). **Text level**,
:meth:`EpisodeHost.session`: an :class:`~toolgym.rollout.session.EnvSession` for loops that call the model
themselves and step the env with text (TRL's ``environment_factory``, SkyRL, verifiers, OpenEnv).

A process usually wants one host per adapter (:meth:`EpisodeHost.shared`): verl builds an agent loop per
sample and SkyRL an env per sample, and a fresh pool for each would rebuild every env (a search index, a
sandbox pool) each time.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from typing import Any, ClassVar, TypeVar

import gymnasium as gym

from toolgym.core.types import Trajectory
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import LLMClient
from toolgym.rollout.dump import DumpSettings, EpisodeDump
from toolgym.rollout.episode import RolloutConfig, run_episode
from toolgym.rollout.keys import EpisodeKey
from toolgym.rollout.pool import EnvPool
from toolgym.rollout.session import EnvSession

#: episodes in flight per host unless the adapter's config says otherwise (each holds an env: a sandbox
#: session, a search index)
DEFAULT_MAX_CONCURRENT_EPISODES = 256
#: threads for env steps and tokenizing: tool calls mostly wait (on the sandbox, a server), so more threads
#: than cores, but bounded
DEFAULT_THREADS = 64

T = TypeVar("T")


class EpisodeHost:
    """Leases, threads, renderers and slots for episodes (see the module docstring); thread-safe.

    Args:
        max_concurrent_episodes: episodes :meth:`play` runs at once per event loop (more wait their turn).
        threads: the thread pool's size (default ``min(max_concurrent_episodes, 64)``).
        max_idle: envs kept per (id, kwargs) once returned (default: all).
        factory: make every env with this instead of ``gym.make(key.env_id, **key.env_kwargs)``.
        name: the threads' name prefix (``toolgym-<name>``), to tell hosts apart in a stack dump.
    """

    _shared: ClassVar[dict[tuple[Any, ...], EpisodeHost]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        *,
        max_concurrent_episodes: int = DEFAULT_MAX_CONCURRENT_EPISODES,
        threads: int | None = None,
        max_idle: int | None = None,
        factory: Callable[[], gym.Env] | None = None,
        name: str = "episodes",
    ):
        if max_concurrent_episodes < 1:
            raise ValueError(f"max_concurrent_episodes must be >= 1, got {max_concurrent_episodes}")
        self.max_concurrent_episodes = max_concurrent_episodes
        self.pool = EnvPool(max_idle=max_idle, factory=factory)
        workers = threads if threads is not None else min(max_concurrent_episodes, DEFAULT_THREADS)
        self.executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix=f"toolgym-{name}")
        self._renderers: dict[tuple[Any, ...], ChatRenderer] = {}
        # per event loop, dropped with it (a loop's id can be reused after it is gone: TRL runs one per call)
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._dumps: dict[tuple[DumpSettings, str], EpisodeDump] = {}
        self._lock = threading.Lock()
        self._request_ids = itertools.count()

    @classmethod
    def shared(cls, name: str, **settings: Any) -> EpisodeHost:
        """This process's host for ``name`` and ``settings`` (made on first use): what an adapter that is
        instantiated per sample (verl's agent loop, SkyRL's env) shares across samples."""
        key = (name, json.dumps(settings, sort_keys=True, default=repr))
        with cls._shared_lock:
            host = cls._shared.get(key)
            if host is None:
                host = cls._shared[key] = cls(name=name, **settings)
            return host

    # -- pieces ------------------------------------------------------------------------------------------

    def renderer(
        self,
        tokenizer: Any,
        *,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        template_tools: bool = False,
        eos_ids: Iterable[int] | None = None,
        model_path: str | None = None,
    ) -> ChatRenderer:
        """The renderer for ``tokenizer`` with these template settings (made once). Its end-of-turn ids also
        hold ``eos_ids``, else those of ``model_path``'s (default: the tokenizer's) generation config."""
        kwargs = dict(chat_template_kwargs or {})
        key = (id(tokenizer), json.dumps(kwargs, sort_keys=True, default=str), bool(template_tools))
        with self._lock:
            renderer = self._renderers.get(key)
        if renderer is not None:
            return renderer
        renderer = ChatRenderer(tokenizer, template_tools=template_tools, chat_template_kwargs=kwargs)
        if eos_ids is None:
            path = model_path or getattr(tokenizer, "name_or_path", None)
            eos_ids = _config_eos_ids(path) if isinstance(path, str) and path else set()
        renderer.eos_ids |= set(eos_ids)
        with self._lock:
            return self._renderers.setdefault(key, renderer)

    def slots(self) -> asyncio.Semaphore:
        """The running event loop's bound on episodes in flight (``max_concurrent_episodes``)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            semaphore = self._slots.get(loop)
            if semaphore is None:
                semaphore = self._slots[loop] = asyncio.Semaphore(self.max_concurrent_episodes)
            return semaphore

    def dump(self, settings: DumpSettings, trainer: str) -> EpisodeDump:
        """The one episode-dump writer for ``settings`` in this host (its count of episodes dumped per step
        must be shared by every sample the host plays)."""
        with self._lock:
            key = (settings, trainer)
            if key not in self._dumps:
                self._dumps[key] = EpisodeDump(settings, trainer=trainer)
            return self._dumps[key]

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the host's threads, in the caller's context (off the event loop)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.executor, context.run, fn, *args)

    @asynccontextmanager
    async def lease(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> AsyncIterator[gym.Env]:
        """An env of the pool for one episode, leased off the event loop (building one can take seconds)."""
        env = await self.call(self.pool.acquire, env_id, env_kwargs)
        try:
            yield env
        finally:
            self.pool.release(env)

    # -- token level ---------------------------------------------------------------------------------------

    async def run(
        self,
        env: gym.Env,
        client: LLMClient,
        renderer: ChatRenderer,
        config: RolloutConfig,
        *,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
        request_id: str | None = None,
        sampling_seed: int | None = None,
    ) -> Trajectory:
        """The shared runner on a leased env, with the host's threads (``run_episode``'s arguments)."""
        return await run_episode(
            env,
            client,
            renderer,
            config,
            seed=seed,
            options=options,
            request_id=request_id or f"episode-{next(self._request_ids)}-{id(self):x}",
            sampling_seed=sampling_seed,
            executor=self.executor,
        )

    async def play(
        self,
        key: EpisodeKey,
        client: LLMClient,
        renderer: ChatRenderer,
        config: RolloutConfig,
        *,
        request_id: str | None = None,
        sampling_seed: int | None = None,
        around: Callable[[gym.Env], AbstractContextManager[object]] | None = None,
    ) -> Trajectory:
        """Play the episode ``key`` pins: wait for a slot, lease its env, reset it on the key's task and seed
        and run it (inside ``around(env)`` when given: the group judge defers the env's verifier so). The
        Trajectory's ``env_id`` is the key's. Failures inside the episode come back in the Trajectory
        (``error`` set), as the runner's do; an env that cannot be built raises (a configuration error, the
        same for every episode)."""
        async with self.slots(), self.lease(key.env_id, key.env_kwargs) as env:
            with around(env) if around is not None else nullcontext():
                traj = await self.run(
                    env,
                    client,
                    renderer,
                    config,
                    seed=key.seed,
                    options={"task": key.task},
                    request_id=request_id,
                    sampling_seed=sampling_seed,
                )
        return traj.model_copy(update={"env_id": traj.env_id or key.env_id})

    # -- text level ----------------------------------------------------------------------------------------

    def session(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> EnvSession:
        """A leased env for a loop that steps it with text itself (see :class:`EnvSession`); close it (or use
        it as a context manager) to give the env back."""
        return EnvSession(self.pool, env_id, dict(env_kwargs or {}))

    def close(self) -> None:
        """Close every env and stop the threads (the host is done; sessions still open get errors)."""
        self.pool.close()
        self.executor.shutdown(wait=False)


def _config_eos_ids(model_path: str) -> set[int]:
    from toolgym.rollout.models import generation_eos_ids

    try:
        return generation_eos_ids(model_path)
    except (OSError, ValueError):  # a tokenizer name that is no model directory or id
        return set()


__all__ = ["DEFAULT_MAX_CONCURRENT_EPISODES", "EpisodeHost"]

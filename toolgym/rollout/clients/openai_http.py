"""An :class:`~toolgym.rollout.clients.base.LLMClient` for a running vLLM or SGLang OpenAI-compatible server.

Why the *completions* endpoint with a token-id prompt: the episode runner owns the chat template and the
token-level trajectory, so the server must see exactly the ids we built and give back exactly the ids it
sampled (``return_token_ids``), each with its logprob. Nothing is re-tokenized from text, which is what keeps
PPO/GRPO trajectories faithful.

The request (see :func:`completion_request`) sets every sampling knob explicitly, including the neutral
``top_k=-1``, ``min_p=0`` and penalties: vLLM otherwise fills unset fields from the model's
``generation_config.json`` (Qwen ships ``repetition_penalty=1.05``, ``top_k=20``), which would silently
sample from a different distribution than the one the trainer asked for.

Logprobs: ``"logprobs": 0`` asks for the sampled token's logprob only (vLLM then returns exactly one entry
per generated token in ``logprobs.token_logprobs``). Their meaning is the server's ``--logprobs-mode``, whose
default ``raw_logprobs`` is the log-softmax of the model's raw logits, *before* temperature, top-k/top-p or
penalties; the HF client reports the same quantity so the backends agree.

Response fields read (vLLM 0.32 ``CompletionResponseChoice``): ``token_ids`` (the sampled ids, EOS included
when generation ended on it), ``logprobs.token_logprobs``, ``finish_reason`` (``stop``/``length``/``abort``)
and ``stop_reason`` (the stop *string* that ended the turn, an int for a stop token id, ``null`` for EOS).
With ``return_tokens_as_token_ids`` the ``logprobs.tokens`` are ``"token_id:N"``, which is the fallback
when a server does not return ``token_ids`` (SGLang support is best effort; vLLM is what the tests run).
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import aiohttp

from toolgym.rollout.clients.base import FinishReason, Generation, Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.util.http import async_session
from toolgym.util.retry import backoff_delay, is_retryable_status

__all__ = ["OpenAICompletionsClient", "completion_request", "parse_completion"]

#: 4xx statuses that mean "not now" rather than "never": request timeout, too many requests.
_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "abort": "abort",
    "error": "error",
}
_TOKEN_ID_PREFIX = "token_id:"


class OpenAICompletionsClient:
    """Token-in/token-out generation over ``POST {base_url}/v1/completions``.

    ``base_url`` is the server root (``http://host:8000``; a trailing ``/v1`` is accepted too). ``model`` is
    the served model name; ``None`` asks ``/v1/models`` once and uses the first. Connection errors, timeouts,
    HTTP 5xx, 408 and 429 are retried ``retries`` times with exponential backoff (``backoff`` seconds, doubled
    each attempt, with jitter so many rollouts do not retry in lock step); other 4xx answers fail at once.
    Every failure raises :class:`ClientError` with the server's message or the last cause (a transport
    failure is named with the URL: ``ConnectError``, ``Timeout``, ``ServerDisconnected``, ...): a generation
    is never returned empty to hide an error. Requests go through one pooled aiohttp session per event loop
    (made on the loop's first request: a session is bound to its loop; ``toolgym.util.http.async_session``),
    chosen over httpx's async client on measurements (docs/benchmarks.md); ``close()`` releases it.
    ``timeout`` bounds connecting and each wait for the server's bytes within one attempt; waiting for a free
    pooled connection is unbounded, so bursts beyond ``max_connections`` queue instead of failing.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_connections: int = 256,
        api_key: str | None = None,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        base = base_url.rstrip("/")
        self.base_url = base.removesuffix("/v1")
        self.model = model
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self.max_connections = max_connections
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        #: the pooled session of each event loop this client has been used on
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._model_lock: asyncio.Lock | None = None
        self._rng = random.Random()  # jitter only; never touches the global random state

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        model = self.model or await self._resolve_model()
        body = completion_request(prompt_ids, sampling, model)
        data = await self._request("POST", "/v1/completions", body, request_id=request_id)
        return parse_completion(data)

    async def close(self) -> None:
        """Close the running loop's session; a session left on another loop is let go (its loop owns its
        connections)."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        sessions, self._sessions = self._sessions, {}
        for owner, session in sessions.items():
            if owner is loop:
                await session.close()
            else:
                session.detach()

    async def __aenter__(self) -> OpenAICompletionsClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            session = self._sessions[loop] = async_session(
                timeout=self.timeout, max_connections=self.max_connections, headers=self._headers
            )
        return session

    async def _resolve_model(self) -> str:
        """The first served model; asked once even when many requests start at the same time."""
        if self._model_lock is None:
            self._model_lock = asyncio.Lock()
        async with self._model_lock:
            if self.model is None:
                data = await self._request("GET", "/v1/models")
                try:
                    self.model = str(data["data"][0]["id"])
                except (KeyError, IndexError, TypeError) as exc:
                    raise ClientError(f"{self.base_url}/v1/models lists no model: {data!r:.300}") from exc
        return self.model

    async def _send(
        self, method: str, url: str, body: dict[str, Any] | None, headers: dict[str, str] | None
    ) -> tuple[int, bytes, str]:
        """One attempt: the answer's status, body and reason phrase (transport failures raise aiohttp's and
        asyncio's errors)."""
        # bytes, not str: aiohttp would encode a str payload again (3.8% of the gateway's samples at c=64)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if data is not None:
            headers = {**(headers or {}), "Content-Type": "application/json"}
        async with self._session().request(method, url, data=data, headers=headers) as resp:
            return resp.status, await resp.read(), resp.reason or ""

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, request_id: str | None = None
    ) -> Any:
        """Send with retries; return the decoded JSON body of the first successful answer."""
        url = self.base_url + path
        attempts = self.retries + 1
        cause, last_exc, last_status = "", None, None
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(backoff_delay(attempt, self.backoff, rng=self._rng))
            # a distinct id per attempt: the server may still be running the attempt that timed out
            headers = None
            if request_id:
                headers = {"X-Request-Id": request_id if attempt == 0 else f"{request_id}-retry{attempt}"}
            try:
                status, raw, reason = await self._send(method, url, body, headers)
            except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
                raise ClientError(f"{method} {url}: {exc!r} (base_url needs http:// or https://)") from exc
            except (aiohttp.ClientError, TimeoutError) as exc:  # connect errors, timeouts, dropped links
                cause, last_exc, last_status = _transport_cause(exc, self.timeout), exc, None
                continue
            if is_retryable_status(status):
                cause, last_exc, last_status = f"HTTP {status}: {_error_message(raw, reason)}", None, status
                continue
            if status >= 400:
                raise ClientError(
                    f"{method} {url} was rejected with HTTP {status}: {_error_message(raw, reason)}",
                    status_code=status,
                )
            try:
                return json.loads(raw)
            except ValueError as exc:
                text = raw[:300].decode(errors="replace")
                raise ClientError(f"{method} {url} answered with non-JSON: {text!r}") from exc
        raise ClientError(
            f"{method} {url} failed after {attempts} attempt(s); last error: {cause}",
            status_code=last_status,
            retryable=True,
        ) from last_exc


def _transport_cause(exc: BaseException, timeout: float) -> str:
    """A transport failure in words: its kind (``ConnectError``, ``Timeout``, ``ServerDisconnected``, or
    aiohttp's class name) and aiohttp's message."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"ConnectError: {exc}"
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError and ConnectionTimeoutError are ones
        return f"Timeout: no answer within {timeout:g} s ({type(exc).__name__}: {exc})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return f"ServerDisconnected: {exc}"
    return f"{type(exc).__name__}: {exc}"


def completion_request(prompt_ids: list[int], sampling: Sampling, model: str) -> dict[str, Any]:
    """The JSON body of one ``/v1/completions`` request (module level so it is easy to inspect and test).

    ``skip_special_tokens`` is false so stop strings are matched against everything the model wrote,
    special tokens included (the decoded text is used for nothing else); ``include_stop_str_in_output``
    keeps the stop string, which the parser needs (e.g. a closing tag).
    """
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k if sampling.top_k > 0 else -1,
        "min_p": 0.0,
        "repetition_penalty": sampling.repetition_penalty,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "stop": list(sampling.stop),
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
        "logprobs": 0,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "n": 1,
        "stream": False,
    }
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    # the neutral penalties above are defaults (they stop a server applying its own); the rest is protocol
    clash = sorted(set(sampling.extra) & (set(body) - {"min_p", "presence_penalty", "frequency_penalty"}))
    if clash:
        raise ClientError(f"Sampling.extra may not override {clash}: set them as Sampling fields")
    body.update(sampling.extra)
    return body


def parse_completion(data: Any) -> Generation:
    """Turn a completions response into a :class:`Generation`, or raise :class:`ClientError` saying why."""
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError) as exc:
        raise ClientError(f"the completion response has no choices: {data!r:.300}") from exc
    logprobs = choice.get("logprobs") or {}
    token_logprobs = logprobs.get("token_logprobs")
    if token_logprobs is None:
        raise ClientError(
            "the completion response has no logprobs (training needs one per token); "
            "the server must honour 'logprobs': 0"
        )
    token_ids = choice.get("token_ids")
    if token_ids is None:
        token_ids = _ids_from_tokens(logprobs.get("tokens"))
    if len(token_ids) != len(token_logprobs) or any(lp is None for lp in token_logprobs):
        raise ClientError(
            f"the completion response has {len(token_ids)} token ids but logprobs "
            f"{token_logprobs!r:.200}: expected exactly one float per token"
        )
    raw_finish = choice.get("finish_reason")
    finish = _FINISH_REASONS.get(raw_finish) if isinstance(raw_finish, str) else None
    if finish is None:
        raise ClientError(f"the completion response has an unexpected finish_reason {raw_finish!r}")
    stop_reason = choice.get("stop_reason")
    return Generation(
        token_ids=[int(t) for t in token_ids],
        logprobs=[float(lp) for lp in token_logprobs],
        finish_reason=finish,
        stop_text=stop_reason if finish == "stop" and isinstance(stop_reason, str) else None,
    )


def _ids_from_tokens(tokens: Any) -> list[int]:
    """Ids from ``"token_id:N"`` tokens (``return_tokens_as_token_ids``), for servers without token_ids."""
    prefix = _TOKEN_ID_PREFIX
    if isinstance(tokens, list) and all(isinstance(t, str) and t.startswith(prefix) for t in tokens):
        return [int(t.removeprefix(_TOKEN_ID_PREFIX)) for t in tokens]
    raise ClientError(
        "the completion response has no token_ids: the server must support 'return_token_ids' "
        "(vLLM >= 0.10.2) or 'return_tokens_as_token_ids'"
    )


def _error_message(raw: bytes, reason: str) -> str:
    """The server's explanation: OpenAI/vLLM ``{"error": {"message"}}``, FastAPI ``detail``, or the text."""
    text = raw.decode(errors="replace")
    try:
        payload = json.loads(text)
    except ValueError:
        return text[:500] or reason
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for key in ("message", "detail", "error"):
            if payload.get(key):
                return str(payload[key])
    return str(payload)[:500]

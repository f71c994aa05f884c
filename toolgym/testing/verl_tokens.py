"""Does a real verl run train on what vLLM sampled? The token check reads a run's trace (``verl_trace`` with
``tokens=True``) and holds every row verl trained on against the generations verl's vLLM server returned:

- the row's tokens are an episode's prompt followed by its response, and every piece vLLM sampled sits in
  it where that generation was asked for (a resumed generation's prompt is the episode so far);
- the response mask is 1 on exactly the sampled tokens, 0 on everything else (tool outputs, the chat
  template's tokens, padding);
- ``old_log_probs`` are vLLM's logprobs of those tokens, and they equal a fresh forward pass (fp32,
  ``transformers``) of the weights that sampled each token: the weights the trainer sent in the sync whose
  version label the generation carried;
- each sync's label names the weights that were synced: what the rollout received sums to what the trainer
  sent, and what the trainer sent is its policy after some update (the train events' checksums).

``plant`` makes the faults a broken trainer would have (a shifted mask, a swapped token, logprobs one
position off, a wrong version label, a replica holding other weights; in a run with partial rollouts, a
resumed generation labelled with the version it began under), so a test can show the check fails on each.
``tests/trainers/verl/test_train_async_cpu.py`` runs it on verl's one-step-off and fully-async runs.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.testing.verl_trace import read_trace

#: vLLM samples in bf16 on the CPU; a fresh fp32 forward pass of the same weights differs by up to ~6e-3
#: on the tiny model (measured over 256 samples, 8 steps), one update at the probe's learning rate by more
LOGPROB_TOLERANCE = 0.02
#: vLLM's logprobs reach verl's ``old_log_probs`` as float32 (bypass mode copies them): no more than rounding
COPY_TOLERANCE = 1e-5


@dataclass
class Episode:
    """One request id's generations, in the order they ran."""

    request: str
    attempts: list[dict[str, Any]]

    @property
    def prompt(self) -> list[int]:
        return self.attempts[0]["prompt_ids"]

    def pieces(self) -> list[tuple[int, dict[str, Any]]]:
        """(where in the row its tokens start, the attempt) for each generation."""
        return [(len(a["prompt_ids"]), a) for a in self.attempts]

    def fits(self, tokens: list[int]) -> bool:
        for start, attempt in self.pieces():
            if tokens[:start] != attempt["prompt_ids"]:
                return False
            if tokens[start : start + len(attempt["token_ids"])] != attempt["token_ids"]:
                return False
        return True


@dataclass
class TokenCheck:
    """What the check found: counts, the worst logprob errors, and every problem (none: the run is right)."""

    rows: int = 0
    sampled_tokens: int = 0
    #: per version label, the sampled tokens it labelled
    versions: dict[int, int] = field(default_factory=dict)
    #: episodes a sync aborted part-way whose generation resumed (more than one attempt for one turn)
    resumed_episodes: int = 0
    #: trained rows whose sampled tokens carry more than one version label (a sync cut a generation short
    #: and it resumed under the new weights), per training call
    mixed_rows: dict[int, int] = field(default_factory=dict)
    #: the largest |fresh forward - vLLM's logprob| with the token's own version's weights
    max_own_error: float = 0.0
    #: of the sampled tokens, how many every other synced weights (that differ from their own) would put
    #: further than the tolerance: a mix-up of versions would be seen on them
    told_apart: int = 0
    #: per training call, the version labels of the tokens it trained on
    versions_by_call: dict[int, list[int]] = field(default_factory=dict)
    #: per sync label, the number of trainer updates before it (the policy checksums it matched)
    updates_before_sync: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def load_run(trace_dir: str | Path) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """A traced run's events and the weights each sync sent, by version label."""
    import torch

    weights = {
        int(path.stem.split("-", 1)[1]): torch.load(path, map_location="cpu", weights_only=True)
        for path in Path(trace_dir).glob("weights-*.pt")
    }
    return read_trace(trace_dir), weights


def check_run(trace_dir: str | Path, model_path: str | Path) -> TokenCheck:
    """``check_tokens`` on a traced run's directory."""
    events, weights = load_run(trace_dir)
    return check_tokens(events, weights, model_path)


def _episodes(events: list[dict[str, Any]]) -> list[Episode]:
    by_request: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if event["kind"] == "attempt":
            by_request.setdefault(event["request"], []).append(event)
    return [
        Episode(request, sorted(attempts, key=lambda a: a["start"]))
        for request, attempts in by_request.items()
    ]


class _Forward:
    """log p(token | tokens before) under each version's weights, one fp32 forward pass per (version, row)."""

    def __init__(self, model_path: str | Path, weights: dict[int, dict[str, Any]], problems: list[str]):
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.base = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32).eval()
        self.weights, self.problems = weights, problems
        #: one model per version, its weights loaded once (the tiny model: a few MiB each)
        self.models: dict[int, Any] = {}
        self.cache: dict[tuple[int, tuple[int, ...]], list[float]] = {}
        self._others: dict[int, list[int]] = {}

    def other_weights(self, version: int) -> list[int]:
        """The versions whose weights differ from ``version``'s (a sync before any update resends them)."""
        if version not in self._others:
            own = self.weights.get(version, {})
            self._others[version] = [
                v
                for v, weights in self.weights.items()
                if weights.keys() != own.keys()
                or not all(self.torch.equal(weights[name], own[name]) for name in own)
            ]
        return self._others[version]

    def _model(self, version: int) -> Any:
        if version not in self.models:
            model = copy.deepcopy(self.base)
            state = {name: t.float() for name, t in self.weights[version].items()}
            result = model.load_state_dict(state, strict=False)
            if result.unexpected_keys:
                self.problems.append(
                    f"version {version}'s weights have names the model lacks: {result.unexpected_keys[:3]}"
                )
            self.models[version] = model
        return self.models[version]

    def logprobs(self, version: int, tokens: list[int]) -> list[float] | None:
        key = (version, tuple(tokens))
        if key not in self.cache:
            if version not in self.weights:
                return None
            with self.torch.no_grad():
                logits = self._model(version)(self.torch.tensor([tokens])).logits[0].float()
            table = self.torch.log_softmax(logits, dim=-1)
            # position i's token is predicted at i - 1; position 0 has no prediction
            self.cache[key] = [math.nan] + [float(table[i - 1, tokens[i]]) for i in range(1, len(tokens))]
        return self.cache[key]


def _check_row(
    call: int,
    index: int,
    sample: dict[str, Any],
    candidates: list[Episode],
    forward: _Forward,
    report: TokenCheck,
) -> Episode | None:
    where = f"training call {call}, row {index}"
    tokens = sample["input_ids"]
    fitting = [episode for episode in candidates if episode.fits(tokens)]
    if not fitting:
        report.problems.append(
            f"{where}: its tokens are not an episode vLLM sampled (prompt then the pieces)"
        )
        return None
    old = sample.get("old_log_probs")
    mask = sample.get("response_mask")
    if old is None or mask is None:
        report.problems.append(f"{where}: verl's batch has no old_log_probs or response_mask")
        return None
    best: tuple[float, Episode] | None = None
    for episode in fitting:
        start = len(episode.prompt)
        worst = 0.0
        for piece_start, attempt in episode.pieces():
            for offset, logprob in enumerate(attempt["log_probs"] or []):
                position = piece_start + offset - start
                worst = max(worst, abs(old[position] - logprob) if position < len(old) else math.inf)
        if best is None or worst < best[0]:
            best = (worst, episode)
    assert best is not None
    worst, episode = best
    start = len(episode.prompt)
    length = len(tokens) - start
    if worst > COPY_TOLERANCE:
        report.problems.append(
            f"{where}: old_log_probs differ from the logprobs vLLM returned by {worst:.3g}"
        )
    sampled: dict[int, tuple[float, int]] = {}  # response position: (vLLM's logprob, version label)
    for piece_start, attempt in episode.pieces():
        if attempt["log_probs"] is None or attempt["version"] is None:
            report.problems.append(f"{where}: a generation came back without logprobs or a version label")
            return episode
        for offset, logprob in enumerate(attempt["log_probs"]):
            sampled[piece_start + offset - start] = (logprob, int(attempt["version"]))
    expected = [1 if position in sampled else 0 for position in range(length)]
    if list(mask[:length]) != expected or any(mask[length:]):
        report.problems.append(
            f"{where}: the response mask is not 1 on exactly the sampled tokens "
            f"(mask {list(mask[:length])}, sampled at {sorted(sampled)})"
        )
    report.rows += 1
    if len({version for _, version in sampled.values()}) > 1:
        report.mixed_rows[call] = report.mixed_rows.get(call, 0) + 1
    report.sampled_tokens += len(sampled)
    report.versions_by_call.setdefault(call, []).extend(version for _, version in sampled.values())
    for position, (logprob, version) in sorted(sampled.items()):
        report.versions[version] = report.versions.get(version, 0) + 1
        own = forward.logprobs(version, tokens)
        if own is None:
            report.problems.append(f"{where}: no synced weights carry the label {version} its tokens have")
            continue
        error = abs(own[start + position] - logprob)
        report.max_own_error = max(report.max_own_error, error)
        if error > LOGPROB_TOLERANCE:
            report.problems.append(
                f"{where}: token {position}'s logprob {logprob:.4f} is not version {version}'s "
                f"({own[start + position]:.4f}, off by {error:.3g})"
            )
        other_errors = [
            abs(table[start + position] - logprob)
            for v in forward.other_weights(version)
            if (table := forward.logprobs(v, tokens)) is not None
        ]
        report.told_apart += bool(other_errors) and min(other_errors) > LOGPROB_TOLERANCE
    return episode


def _same_weights(these: dict[str, float], those: dict[str, float], *, rel_tol: float) -> bool:
    """Do two sets of per-weight sums agree on every name both have (a tied LM head is sent under its own
    name but is no parameter of its own), with the names of ``those`` all present in ``these``?"""
    if not those or not set(those) <= set(these):
        return False
    return all(
        math.isclose(these[name], value, rel_tol=rel_tol, abs_tol=1e-9) for name, value in those.items()
    )


def _check_syncs(events: list[dict[str, Any]], report: TokenCheck) -> None:
    sent = {e["version"]: e["parameters"] for e in events if e["kind"] == "sync_sent"}
    received = [e for e in events if e["kind"] == "sync_received"]
    trains = sorted(
        (e for e in events if e["kind"] == "train" and "parameters" in e), key=lambda e: e["call"]
    )
    if not sent:
        report.problems.append("no weight sync was traced")
    for event in received:
        theirs = sent.get(event["version"])
        if theirs is None:
            report.problems.append(
                f"the rollout received weights labelled {event['version']} no trainer sent"
            )
        elif set(theirs) != set(event["parameters"]) or not _same_weights(
            event["parameters"], theirs, rel_tol=1e-12
        ):
            report.problems.append(
                f"the weights the rollout received as version {event['version']} are not the ones "
                "the trainer sent under it"
            )
    for version, weights in sorted(sent.items()):
        # the trainer's policy after k updates: exact sums, as the weights are sent in the trainer's dtype
        after = [k + 1 for k, e in enumerate(trains) if _same_weights(weights, e["parameters"], rel_tol=1e-9)]
        if after:
            report.updates_before_sync[version] = after[-1]
        elif _same_weights(weights, sent[min(sent)], rel_tol=1e-12):  # the weights before any update
            report.updates_before_sync[version] = 0
        else:
            report.problems.append(
                f"the weights synced as version {version} are not the trainer's before or after any update"
            )


def check_tokens(
    events: list[dict[str, Any]], weights: dict[int, dict[str, Any]], model_path: str | Path
) -> TokenCheck:
    """Hold every row verl trained on against what vLLM sampled and against the synced weights (the module
    docstring says what each check is)."""
    report = TokenCheck()
    forward = _Forward(model_path, weights, report.problems)
    episodes = _episodes(events)
    report.resumed_episodes = sum(
        any(a["stop_reason"] in ("aborted", "abort") for a in e.attempts) for e in episodes
    )
    unused = list(episodes)
    trains = [e for e in events if e["kind"] == "train" and "samples" in e]
    if not trains:
        report.problems.append("no training call was traced with its samples")
    for event in trains:
        for index, sample in enumerate(event["samples"]):
            episode = _check_row(event["call"], index, sample, unused, forward, report)
            if episode is not None:
                unused.remove(episode)
    _check_syncs(events, report)
    return report


def _first_row(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e["kind"] == "train" and e.get("samples"))["samples"][0]


def _shift_mask(events: list[dict[str, Any]]) -> None:
    row = _first_row(events)
    row["response_mask"] = [0, *row["response_mask"][:-1]]


def _swap_token(events: list[dict[str, Any]]) -> None:
    row = _first_row(events)
    row["input_ids"][-1] = (row["input_ids"][-1] + 1) % 100


def _logprobs_one_off(events: list[dict[str, Any]]) -> None:
    row = _first_row(events)
    row["old_log_probs"] = [*row["old_log_probs"][1:], 0.0]


def _wrong_label(events: list[dict[str, Any]]) -> None:
    labels = sorted({e["version"] for e in events if e["kind"] == "attempt"})
    versions = sorted({e["version"] for e in events if e["kind"] == "sync_sent"})
    for event in events:
        if event["kind"] == "attempt":
            # every generation names the next synced version (the last names the first)
            later = [v for v in versions if v > event["version"]]
            event["version"] = later[0] if later else versions[0]
    assert labels


def _replica_holds_other_weights(events: list[dict[str, Any]]) -> None:
    last = max(e["version"] for e in events if e["kind"] == "sync_received")
    for event in events:
        if event["kind"] == "sync_received" and event["version"] == last:
            name = sorted(event["parameters"])[0]
            event["parameters"][name] += 1e-3
            return


def _resumed_keeps_first_label(events: list[dict[str, Any]]) -> None:
    """A client that labels a resumed generation with the version it began under (every token the old one)."""
    by_request: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if event["kind"] == "attempt":
            by_request.setdefault(event["request"], []).append(event)
    resumed = [a for a in by_request.values() if any(e["stop_reason"] in ("aborted", "abort") for e in a)]
    assert resumed, "no generation in this run was cut short and resumed"
    for attempts in resumed:
        for attempt in attempts[1:]:
            attempt["version"] = attempts[0]["version"]


#: a fault's name: how it breaks a copy of a run's events
FAULTS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "mask shifted by one": _shift_mask,
    "a trained token swapped": _swap_token,
    "old_log_probs one position off": _logprobs_one_off,
    "version labels naming the next sync": _wrong_label,
    "the replica holding other weights": _replica_holds_other_weights,
}
#: faults only a run with a generation cut short by a sync can have (verl's partial rollouts)
PARTIAL_FAULTS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "a resumed generation labelled with the version it began under": _resumed_keeps_first_label,
}


def plant(events: list[dict[str, Any]], fault: str) -> list[dict[str, Any]]:
    """A copy of ``events`` with ``fault`` (a key of ``FAULTS`` or ``PARTIAL_FAULTS``) planted."""
    broken = copy.deepcopy(events)
    {**FAULTS, **PARTIAL_FAULTS}[fault](broken)
    return broken


__all__ = [
    "FAULTS",
    "LOGPROB_TOLERANCE",
    "PARTIAL_FAULTS",
    "TokenCheck",
    "check_run",
    "check_tokens",
    "load_run",
    "plant",
]

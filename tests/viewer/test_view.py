"""``toolgym view`` without a browser: what it reads (and refuses), and what the page it writes holds.

Episodes are real runner output (scripted turns through the tiny model's tokenizer and chat template); the
browser test (test_browser.py) opens a page of a real tiny-model rollout.
"""

from __future__ import annotations

import asyncio
import re
from html.parser import HTMLParser

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.cli import main
from toolgym.core.types import Trajectory
from toolgym.rollout import ChatRenderer, RolloutConfig, run_episode
from toolgym.rollout.dump import DumpSettings, EpisodeDump
from toolgym.rollout.evaluate import score
from toolgym.testing.scripted import ScriptedClient
from toolgym.viewer import load, write_report
from toolgym.viewer.episode_view import build, segments

ENV = "toolgym/Calculator-v0"
CALL_THEN_ANSWER = ["<calculator>99*603</calculator>", "<answer>59697</answer>"]


def play(renderer, script, seed=0) -> Trajectory:
    env = gym.make(ENV)
    traj = asyncio.run(
        run_episode(env, ScriptedClient(renderer, script), renderer, RolloutConfig(), seed=seed)
    )
    return traj.model_copy(update={"env_id": ENV, "group": f"{ENV}#{seed}"})


def write_jsonl(path, trajectories):
    path.write_text("".join(t.model_dump_json() + "\n" for t in trajectories))
    return path


class _Elements(HTMLParser):
    """Every start tag with its attributes, and the text, of a page (the stdlib parser: no browser here)."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def having(self, tag: str, cls: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]


def test_runner_records_step_times_and_its_tokenizer(renderer):
    traj = play(renderer, CALL_THEN_ANSWER)
    assert len(traj.step_s) == traj.num_turns == 2 and all(s > 0 for s in traj.step_s)
    assert traj.tokenizer == renderer.tokenizer.name_or_path


def test_token_segments_follow_the_mask_with_turn_boundaries(renderer, tmp_path):
    traj = play(renderer, CALL_THEN_ANSWER)
    (episode,) = load(write_jsonl(tmp_path / "r.jsonl", [traj])).episodes
    decode = lambda ids: [renderer.decode([i]) for i in ids]  # noqa: E731
    parts = segments(episode, decode)
    assert [p.kind for p in parts] == ["prompt", "model", "template", "model"]
    assert [p.label.split(" (")[0] for p in parts[1:]] == [
        "model turn 1",
        "template / observation 1",
        "model turn 2",
    ]
    assert "".join(t.text for t in parts[1].tokens) == "<calculator>99*603</calculator><|im_end|>"
    assert "59697" in "".join(t.text for t in parts[2].tokens)
    # the ids are the trajectory's, in order; logprobs only where the model sampled
    assert [t.id for p in parts for t in p.tokens] == traj.prompt_ids + traj.response_ids
    assert all(t.logprob is not None for p in parts if p.kind == "model" for t in p.tokens)
    assert all(t.logprob is None for p in parts if p.kind != "model" for t in p.tokens)


def test_the_report_holds_the_list_the_plots_and_every_episode(renderer, tmp_path, capsys):
    trajs = [play(renderer, CALL_THEN_ANSWER, seed=0), play(renderer, ["<answer>1</answer>"], seed=1)]
    source = write_jsonl(tmp_path / "r.jsonl", trajs)
    assert main(["view", str(source), "--out", str(tmp_path / "r.html")]) == 0
    assert capsys.readouterr().out.strip().endswith(f"2 episodes (rollout) -> {tmp_path / 'r.html'}")
    html = (tmp_path / "r.html").read_text()
    page = _Elements(html)
    rows = page.having("tr", "episode-row")
    assert [r["data-index"] for r in rows] == ["0", "1"]
    assert [r["data-env"] for r in rows] == [ENV, ENV] and [r["data-stop"] for r in rows] == ["answer"] * 2
    assert len(page.having("figure", "plot")) == 4  # no step plot outside a training dump
    titles = re.findall(r'<figure class="plot"><h3>([^<]+)</h3><svg', html)
    assert titles == ["Reward by env", "Turns and tool calls per episode", "Tool latency", "Response length"]
    # every token of both episodes is a span; mask-1 spans are exactly the generated tokens
    model_tokens = [a for a in page.having("span", "model") if "title" in a]  # tokens (legends have none)
    template_tokens = [a for a in page.having("span", "template") if "title" in a]
    assert len(model_tokens) == sum(t.generated_tokens for t in trajs)
    assert len(template_tokens) == sum(len(t.response_ids) - t.generated_tokens for t in trajs)
    assert all(re.fullmatch(r"id \d+ · logprob -?\d+\.\d{4}", a["title"]) for a in model_tokens)
    assert all(re.fullmatch(r"id \d+", a["title"]) for a in template_tokens)
    text = "".join(page.text)
    assert "<calculator>99*603</calculator>" in text and '"gold": "3581820"' in text
    assert "no CDN" not in html and not re.search(r'<(script|link)[^>]+(src|href)="https?:', html)


def test_a_template_that_re_renders_turns_gets_the_re_tokenisation_warning(renderer, tmp_path):
    stripping = ChatRenderer(renderer.tokenizer)
    stripping.tokenizer = _StrippingTokenizer(renderer.tokenizer)
    traj = play(
        stripping, ["<think>big numbers</think><calculator>99*603</calculator>", "<answer>1</answer>"]
    )
    assert traj.error and traj.error.startswith("TemplateError:")  # the runner's own prefix check
    loaded = write_report(write_jsonl(tmp_path / "bad.jsonl", [traj]), tmp_path / "bad.html", model="tiny")
    html = (tmp_path / "bad.html").read_text()
    page = _Elements(html)
    assert len(page.having("p", "prefix-warning")) == 1
    assert "1 re-tokenisation warnings" in "".join(page.text)
    view = build(0, loaded.episodes[0], None)
    assert view.warnings[0].startswith("Re-tokenisation") and "Not trained on" in view.warnings[-1]
    # what the model generated before the failure is kept, all of it under mask 0
    assert [p.label for p in view.segments[1:]] == [
        "response (mask 0: the episode failed, none of it is trained on)"
    ]
    assert len(view.segments[1].tokens) == len(traj.response_ids) > 0


class _StrippingTokenizer:
    """A template that drops <think> from earlier assistant turns (as some reasoning models' do)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def apply_chat_template(self, messages, **kwargs):
        last = len(messages) - 1
        cleaned = [
            {**m, "content": m["content"].split("</think>")[-1]}
            if m["role"] == "assistant" and i < last
            else m
            for i, m in enumerate(messages)
        ]
        return self.inner.apply_chat_template(cleaned, **kwargs)


def test_an_eval_report_opens_with_its_trajectories(renderer, tmp_path):
    trajs = [play(renderer, CALL_THEN_ANSWER, seed=s) for s in (0, 1)]
    episodes = write_jsonl(tmp_path / "t.jsonl", trajs)
    report = score(ENV, trajs, k=1)
    report.trajectories = str(episodes)
    (tmp_path / "report.json").write_text(report.model_dump_json())
    loaded = load(tmp_path / "report.json")
    assert loaded.kind == "eval" and len(loaded.episodes) == 2 and loaded.report.tasks == 2

    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "report.json").write_text(report.model_dump_json())
    (moved / "t.jsonl").write_text(episodes.read_text())
    episodes.unlink()
    assert len(load(moved / "report.json").episodes) == 2  # found next to the report

    report.trajectories = None
    (tmp_path / "bare.json").write_text(report.model_dump_json())
    bare = load(tmp_path / "bare.json")
    assert bare.episodes == [] and "--trajectories" in bare.notes[0]
    write_report(tmp_path / "bare.json", tmp_path / "bare.html")
    assert 'id="tasks"' in (tmp_path / "bare.html").read_text()


def test_toolgym_eval_names_its_trajectories_in_the_report(renderer, tmp_path, monkeypatch, capsys):
    """``toolgym eval --out R --trajectories T`` records T in R, so ``toolgym view R`` shows the episodes
    (the evaluation itself is stood in for: its own tests are tests/rollout/test_rollout_commands.py)."""
    from toolgym.cli import rollout as rollout_cli

    trajs = [play(renderer, CALL_THEN_ANSWER, seed=s) for s in (0, 1)]
    write_jsonl(tmp_path / "t.jsonl", trajs)
    monkeypatch.setattr(rollout_cli, "_run_with_client", lambda args, work: score(ENV, trajs, k=1))
    monkeypatch.chdir(tmp_path)
    args = ["eval", "--env", ENV, "--model", "tiny", "--out", "report.json", "--trajectories", "t.jsonl"]
    assert main(args) == 0
    assert main(["view", "report.json"]) == 0  # the page goes next to the report
    assert capsys.readouterr().out.strip().endswith("2 episodes (eval) -> report.json.html")
    rows = _Elements((tmp_path / "report.json.html").read_text()).having("tr", "episode-row")
    assert len(rows) == 2


def test_a_dump_directory_opens_with_steps_and_the_step_plot(renderer, tmp_path):
    dump = EpisodeDump(
        DumpSettings(directory=str(tmp_path / "episodes"), every=2, episodes=1), trainer="test"
    )
    traj = play(renderer, CALL_THEN_ANSWER)
    written = [dump.offer(step, traj, trained=step != 4) for step in (0, 1, 2, 2, 4)]
    assert written == [True, False, True, False, True]
    loaded = load(tmp_path / "episodes")
    assert loaded.kind == "dump" and [e.step for e in loaded.episodes] == [0, 2, 4]
    assert [e.trained for e in loaded.episodes] == [True, True, False]
    labels = [build(i, e, None).segments[1].label for i, e in enumerate(loaded.episodes)]
    assert labels[0] == "model turn 1 (mask 1: trained on)"
    assert labels[2] == "model turn 1 (mask 1: generated; this episode is not trained on)"
    write_report(tmp_path / "episodes", tmp_path / "d.html")
    assert "<h3>Reward by step</h3>" in (tmp_path / "d.html").read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty; expected rollout JSONL"),
        ("\n\n", "is empty"),
        ("not json\n", "x.jsonl:1 is not JSON"),
        ("[1, 2]\n", "x.jsonl:1 is a JSON list, not an object"),
        ('{"hello": 1}\n', "x.jsonl:1 is neither a trajectory nor a dumped episode"),
        ('{"task_id": "t", "reward": "high"}\n', "x.jsonl:1: not a valid trajectory (reward:"),
        ('{"pass_at_1": 0.5}', "looks like an eval report but is not a valid one"),
    ],
)
def test_bad_files_are_refused_with_what_was_expected(tmp_path, capsys, content, message):
    (tmp_path / "x.jsonl").write_text(content)
    with pytest.raises(ValueError, match=re.escape(message)):
        load(tmp_path / "x.jsonl")
    assert main(["view", str(tmp_path / "x.jsonl")]) == 2
    assert "toolgym view: error: " in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl.html").exists()


def test_missing_files_and_empty_directories_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file at"):
        load(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match=r"without \.jsonl files"):
        load(tmp_path)
    (tmp_path / "a.jsonl").write_text("")
    with pytest.raises(ValueError, match="are empty"):
        load(tmp_path)


def test_without_a_tokenizer_the_page_shows_ids(renderer, tmp_path):
    traj = play(renderer, CALL_THEN_ANSWER).model_copy(update={"tokenizer": None})
    loaded = write_report(write_jsonl(tmp_path / "r.jsonl", [traj]), tmp_path / "r.html")
    assert "give --model" in loaded.notes[0]
    spans = [a for a in _Elements((tmp_path / "r.html").read_text()).having("span", "model") if "title" in a]
    assert len(spans) == traj.generated_tokens
    assert f">[{traj.response_ids[0]}]</span>" in (tmp_path / "r.html").read_text()


def test_the_server_serves_the_index_and_episodes_on_demand(renderer, tmp_path):
    import threading

    import httpx

    from toolgym.viewer.serve import make_server

    loaded = load(write_jsonl(tmp_path / "r.jsonl", [play(renderer, CALL_THEN_ANSWER)]))
    server = make_server(loaded, None, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        index = httpx.get(base + "/").text
        assert 'data-mode="server"' in index and 'class="episode-row"' in index
        assert 'class="episode"' not in index  # details are fetched, not inlined
        episode = httpx.get(base + "/episode/0")
        assert episode.status_code == 200 and 'id="episode-0"' in episode.text
        assert httpx.get(base + "/episode/1").status_code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_without_matplotlib_the_page_has_everything_but_the_plots(renderer, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "toolgym.viewer.plots", raising=False)
    loaded = write_report(
        write_jsonl(tmp_path / "r.jsonl", [play(renderer, CALL_THEN_ANSWER)]), tmp_path / "r.html"
    )
    page = _Elements((tmp_path / "r.html").read_text())
    assert page.having("figure", "plot") == [] and len(page.having("tr", "episode-row")) == 1
    assert "the summary plots need matplotlib: pip install matplotlib" in loaded.notes

"""``toolgym rollout ... --out r.jsonl && toolgym view r.jsonl --out r.html``, opened in headless Chromium.

The rollout is the tiny model's, served by the session's vLLM server (``vllm_server``, shared with the other
HTTP tests); both commands run as a user runs them (new processes). The page is driven through Chromium's
DevTools protocol: the checks read the live DOM after the page's script ran (what is visible, what a filter
hides, what a click shows), and a screenshot is saved under the test's tmp dir.

Chromium is Debian's package; ``make test`` installs it where it is missing and the machine allows it (root,
apt), ``.ci/run`` requires it. Elsewhere this file skips, saying so.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian: apt-get install chromium; make test installs it as root)",
)

ENV = "toolgym/Calculator-v0"


@pytest.fixture(scope="module")
def page_file(vllm_server, tmp_path_factory) -> tuple[Path, list[dict]]:
    """A real tiny-model rollout written by ``toolgym rollout`` and its page written by ``toolgym view``."""
    work = tmp_path_factory.mktemp("view")
    out = work / "r.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "toolgym.cli",
        "rollout",
        "--env",
        ENV,
        "--episodes",
        "3",
        "--group-size",
        "2",
    ]
    cmd += ["--model", "tiny", "--server", vllm_server.base_url, "--out", str(out), "--no-progress"]
    cmd += ["--max-tokens-per-turn", "48", "--max-response-tokens", "400", "--temperature", "1.0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    view = [sys.executable, "-m", "toolgym.cli", "view", str(out), "--out", str(work / "r.html")]
    proc = subprocess.run(view, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith(f"6 episodes (rollout) -> {work / 'r.html'}")
    return work / "r.html", [json.loads(line) for line in out.read_text().splitlines()]


class Browser:
    """Headless Chromium with one page, driven over the DevTools protocol (a websocket per page)."""

    def __init__(self, profile: Path):
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
        args += ["--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1400,1000"]
        self.proc = subprocess.Popen(
            [*args, "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for line in self.proc.stderr:  # Chromium prints its DevTools address once it listens
            found = re.search(r"DevTools listening on ws://([\w.]+:\d+)/", line)
            if found:
                break
        else:
            raise RuntimeError(f"chromium exited ({self.proc.wait()}) before its DevTools port opened")
        # the rest of its log is drained, so that a full pipe never blocks it
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        page = httpx.put(f"http://{found.group(1)}/json/new?about:blank").json()  # a page of our own
        from websockets.sync.client import connect

        self.ids = itertools.count(1)
        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None))

    def call(self, method: str, **params) -> dict:
        sent = next(self.ids)
        self.ws.send(json.dumps({"id": sent, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == sent:
                assert "error" not in reply, reply
                return reply["result"]

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Load ``url`` and wait until the page's script ran (it fills in the count of rows shown)."""
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        ran = "document.readyState === 'complete' && !!document.getElementById('shown')?.textContent"
        while not self.js(ran):
            time.sleep(0.05)

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stack.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "profile")
    yield b
    b.close()


VISIBLE = "(e) => !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length)"


def test_the_page_of_a_real_rollout_renders_episodes_tokens_and_plots(page_file, browser, tmp_path):
    html, trajectories = page_file
    browser.open(html.as_uri() + "#episode-0:tokens")

    # the episode list: every trajectory a row, the script counted them
    assert browser.js("document.querySelectorAll('tr.episode-row').length") == len(trajectories) == 6
    assert browser.js("document.getElementById('shown').textContent") == "6 of 6 shown"

    # the plots: inline SVG that the browser laid out
    plots = browser.js(
        "Array.from(document.querySelectorAll('#plots figure')).map(f => "
        "[f.querySelector('h3').textContent, f.querySelector('svg').getBoundingClientRect().width])"
    )
    assert [title for title, _ in plots] == [
        "Reward by env",
        "Turns and tool calls per episode",
        "Tool latency",
        "Response length",
    ]
    assert all(width > 100 for _, width in plots)

    # episode 0's token view is the one shown: its mask-1 tokens are exactly the generated ones, visible
    first = trajectories[0]
    shown = browser.js(
        f"Array.from(document.querySelectorAll('.detail')).filter({VISIBLE}).map(d => d.dataset.index)"
    )
    assert shown == ["0"]
    tokens = browser.js(
        "(() => { const d = document.querySelector('.detail[data-index=\"0\"]');"
        f" const vis = {VISIBLE};"
        " const spans = (k) => Array.from(d.querySelectorAll('.view.tokens span.t.' + k + '[title]'));"
        " return {model: spans('model').filter(vis).length, template: spans('template').length,"
        " titles: spans('model').map(s => s.title),"
        " boundaries: Array.from(d.querySelectorAll('.view.tokens .boundary')).map(b => b.textContent),"
        " conversation: vis(d.querySelector('.view.conversation'))}; })()"
    )
    assert tokens["model"] == sum(first["response_mask"]) > 0
    assert tokens["template"] == len(first["response_mask"]) - sum(first["response_mask"])
    assert all(t.startswith("id ") and " · logprob " in t for t in tokens["titles"])  # logprobs on hover
    assert tokens["boundaries"][0].startswith("prompt · ")
    assert tokens["boundaries"][1].startswith("model turn 1 (mask 1: trained on)")
    assert tokens["conversation"] is False
    browser.screenshot(tmp_path / "viewer-tokens.png")

    # a filter hides rows; a click shows that episode's conversation
    stop = first["stop_reason"]
    browser.js(
        f"(() => {{ const s = document.getElementById('f-stop'); s.value = {json.dumps(stop)};"
        " s.dispatchEvent(new Event('input')); })()"
    )
    visible_rows = browser.js(
        f"Array.from(document.querySelectorAll('tr.episode-row')).filter({VISIBLE}).length"
    )
    assert visible_rows == sum(t["stop_reason"] == stop for t in trajectories)
    last = len(trajectories) - 1
    browser.js(f"document.querySelector('tr.episode-row[data-index=\"{last}\"]').click()")
    detail = browser.js(
        f"(() => {{ const d = document.querySelector('.detail[data-index=\"{last}\"]');"
        f" const vis = {VISIBLE};"
        " return {shown: vis(d), conversation: vis(d.querySelector('.view.conversation')),"
        " turns: d.querySelectorAll('.turn').length}; })()"
    )
    assert detail == {"shown": True, "conversation": True, "turns": len(trajectories[last]["turns"])}
    browser.screenshot(tmp_path / "viewer.png")
    assert (tmp_path / "viewer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("TOOLGYM_VIEWER_SCREENSHOT"):  # docs/viewer.md's picture: make it with this test
        shutil.copy(tmp_path / "viewer-tokens.png", os.environ["TOOLGYM_VIEWER_SCREENSHOT"])


def test_the_server_mode_fetches_an_episode_when_it_is_chosen(page_file, browser):
    """``toolgym view FILE --port P``: the index has no episode inline; choosing one fetches its detail."""
    from toolgym.viewer import load, token_decoder
    from toolgym.viewer.serve import make_server

    html, trajectories = page_file
    loaded = load(html.with_name("r.jsonl"))
    decode, why = token_decoder(loaded)
    assert why is None
    server = make_server(loaded, decode, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        browser.open(f"http://127.0.0.1:{server.server_address[1]}/#episode-2:tokens")
        fetched = "document.querySelector('.detail .episode')?.dataset.index"
        while browser.js(fetched) is None:  # the detail arrives after the page loaded
            time.sleep(0.05)
        assert browser.js(fetched) == "2"
        shown = browser.js(
            f"(() => {{ const vis = {VISIBLE}; const d = document.querySelector('.detail');"
            " return {tokens: vis(d.querySelector('.view.tokens')),"
            " model: d.querySelectorAll('.view.tokens span.t.model[title]').length}; })()"
        )
        assert shown == {"tokens": True, "model": sum(trajectories[2]["response_mask"])}
    finally:
        server.shutdown()
        server.server_close()

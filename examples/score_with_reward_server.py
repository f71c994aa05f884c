"""Score responses the way a trainer does: remotely with the reward server, or in process with compute_score.

Without ``--url`` (or ``$TOOLGYM_REWARD_URL``) the script starts the reward server itself, in a thread on a
free port; with ``--url http://host:8001`` it uses one started with ``toolgym serve rewards --port 8001``.

    python examples/score_with_reward_server.py [--url URL]
"""

import argparse
import contextlib
import os

from toolgym.rewards.compute_score import compute_score
from toolgym.server.reward_client import RewardClient, RewardServerError
from toolgym.server.rewards import create_app
from toolgym.testing.servers import serve_in_thread

ADD_TESTS = {"type": "code_tests", "tests": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}
# (model response, verification_info): what a trainer has for each sample of a batch
BATCH = [
    ("so the answer is \\boxed{\\frac{1}{2}}", {"type": "math", "ground_truth": "0.5"}),
    ("I think it is \\boxed{2}", {"type": "math", "ground_truth": "0.5"}),
    ("<answer>93,388,581</answer>", {"type": "numeric", "ground_truth": 93388581}),
    ("<answer>the city of Paris</answer>", {"type": "f1", "ground_truth": ["Paris"]}),
    ("<answer>def add(a, b):\n    return a + b</answer>", ADD_TESTS),
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("TOOLGYM_REWARD_URL"), help="a running reward server")
    args = parser.parse_args(argv)

    # serve_in_thread: the server on 127.0.0.1:<free port> until the with block ends
    server = contextlib.nullcontext(args.url) if args.url else serve_in_thread(create_app(max_concurrency=4))
    with server as url, RewardClient(url, max_workers=2, timeout=60) as client:
        print(f"reward server at {url}: {client.health()['types']}")
        results = client.score_batch([r for r, _ in BATCH], [info for _, info in BATCH])  # in order
        for (response, info), r in zip(BATCH, results):
            print(f"{info['type']:<11} score {r.score:.2f}  passed {r.passed!s:<5}  {response!r:.40}")

        # A request no scorer can take is refused loudly (HTTP 422), never scored as a silent 0.
        try:
            client.score("\\boxed{1}", {"type": "maths", "ground_truth": "1"})
        except RewardServerError as exc:
            print(f"refused: {exc}")

    # verl's custom reward function runs the same scorers in process; data_source picks the scorer.
    print("compute_score:", compute_score("openai/gsm8k", "48 + 24 = 72, so \\boxed{72}.", "72"))


if __name__ == "__main__":
    main()

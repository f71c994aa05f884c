"""bm25s starts jax's backend when it is imported where jax is installed (a ``jax.lax.top_k`` call at import):
on a GPU host that claims GPU memory in every process that imports toolgym's search, and where jax's CUDA
plugin cannot start, ``import bm25s`` raises (seen on an H100 host). toolgym imports bm25s with jax hidden.

A stand-in ``jax`` package whose backend fails the way that host's did shows both: bm25s alone fails to
import, toolgym's index imports, builds and ranks, and jax is never imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

FAILING_JAX = {
    "jax/__init__.py": "from jax import lax\n",
    "jax/lax.py": textwrap.dedent(
        """
        def top_k(operand, k):
            raise RuntimeError("Unable to initialize backend 'cuda': no supported devices found")
        """
    ),
}


def _run(code: str, path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_the_index_imports_and_ranks_where_jax_cannot_start(tmp_path):
    for name, text in FAILING_JAX.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)

    alone = _run("import bm25s", tmp_path)
    assert alone.returncode != 0 and "Unable to initialize backend 'cuda'" in alone.stderr

    ours = _run(
        textwrap.dedent(
            """
            import sys
            from toolgym.search.bm25 import BM25Index

            corpus = [
                {"id": "1", "contents": "Alpha\\nred apples"},
                {"id": "2", "contents": "Beta\\ngreen pears"},
            ]
            index = BM25Index.build(corpus)
            print([hit.id for hit in index.search("pears", 2)], "jax" in sys.modules)
            """
        ),
        tmp_path,
    )
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.split() == ["['2']", "False"]

"""``python -m toolgym.search --size N --seed S --out corpus.jsonl``: write a knowledge world's corpus.

(The entry point is here, not in ``world.py``: ``import toolgym`` already imports that module, and running
an imported module with ``-m`` makes Python warn.)
"""

from toolgym.search.world import main

raise SystemExit(main(prog="python -m toolgym.search"))

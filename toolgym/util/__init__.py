"""Helpers with no toolgym vocabulary of their own, shared by several layers, importing no other toolgym
package: how HTTP clients are made (``http``), the retry policy (``retry``), text tables (``table``),
``KEY=VALUE`` kwargs, counts and the model dtypes ``--dtype`` takes (``kwargs``), text clipping and JSON
depth (``text``), the cache directory (``paths``), JSON-lines reading (``jsonl``), the procedural worlds'
invented words (``world_vocabulary``) and a program's own time, which a busy machine does not stretch
(``program_clock``: the code verifier's and the sandbox's time limits).
"""

"""SWE-v0's machinery, without Docker: the repository store and the workspace archives (``repos``,
``workspaces``), the interpreters per repository (``interpreters``), the procedural repository world
(``world``, ``themes``, ``mutate``), mining rows from a repository (``mine``) and SWE-bench's validation of
a row on this machine (``validate``). Environments per repository version: ``recipes``, ``requirements``,
``environments`` (the build) and ``row_envs`` (SWE-v0's side). The env itself is :mod:`toolgym.envs.swe`;
its judge is :mod:`toolgym.rewards.swe`.
"""

"""The verifiers plugin module for toolgym: verifiers (>= 0.4) imports a taskset id's top-level module
(``toolgym-verifiers`` -> ``toolgym_verifiers``) and takes the Taskset, Env and Harness it exports.
Everything lives in ``toolgym.trainers.verifiers_adapter``; this module only names it for verifiers."""

from toolgym.trainers.verifiers_adapter.environment import ToolgymEnv, ToolgymHarness, ToolgymTaskset

__all__ = ["ToolgymEnv", "ToolgymHarness", "ToolgymTaskset"]

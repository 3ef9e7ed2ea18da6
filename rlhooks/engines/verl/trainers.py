"""The verl trainers ``rlhooks train`` runs besides V1, by the name ``config.trainer_in_use`` gives them.

V1 (verl's default) is the main path (``v1/``). Every other trainer is a package listed in ``REMOVABLE``
and reached only through ``removable``, so deleting it is deleting its package and its entry here
(``tests/core/test_layout.py`` proves it for the legacy trainer). Its package provides, importable
without verl:

* ``TRAINER_NAMES``: the class names ``rlhooks.engines.verl`` exports for it, ``trainer_class(name)``;
* ``task_runner()``: verl's TaskRunner building it (``rlhooks train``);
* ``run_cpu_learner(cfg)``, ``build_cpu_trainer(cfg, ...)``: the CPU learner on it (``trainer.device=cpu``);
* ``RELIED_ON``, ``CONFIG_DEFAULTS``: the verl members and defaults ``compat.py`` fingerprints for it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from rlhooks.core.errors import ConfigError, ConfigIssue

#: trainer name -> its package
REMOVABLE: dict[str, str] = {"legacy": "rlhooks.engines.verl.legacy"}


def removable(name: str) -> ModuleType:
    """The package of trainer ``name``; a ConfigError on ``trainer.use_v1`` when this rlhooks has none."""
    if name not in REMOVABLE:
        raise ConfigError([ConfigIssue("verl.trainer.use_v1", f"this rlhooks has no {name} trainer: it runs verl's "
                                       f"V1 trainer (trainer.use_v1=true, verl's default)")],
                          "(the verl config)", kind="verl config")
    return importlib.import_module(REMOVABLE[name])

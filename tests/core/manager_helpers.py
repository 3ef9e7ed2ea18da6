"""Building a RunManager and a small trajectory Batch, for the manager and plugin-mistake tests."""

from __future__ import annotations

import numpy as np

from rlhooks import Batch
from rlhooks.host import RunManager, load_config


def manager(cfg, tmp_path, reg, **kw):
    return RunManager(load_config(cfg, registry=reg), registry=reg, run_dir=tmp_path, **kw)


def batch(n=4):
    return Batch({"uid": np.repeat(np.arange(n // 2), 2), "reward": np.arange(float(n)),
                  "data_source": np.array(["a", "b"] * (n // 2), dtype=object)})

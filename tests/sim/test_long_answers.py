"""Issue 18, case 7 in the simulator: a huge answer costs bounded time and memory, as in a real rollout.

A rollout stops at ``max_response_length`` tokens, so the simulated learner never writes an answer
longer than that (and such a response is wrong); the dataset's text stays Python strings (a fixed-width
numpy copy of one 1M-character answer costs 4 MB per row).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rlhooks.engines.sim.data import SimDataset, generate_table
from rlhooks.engines.sim.engine import SimEngine, load_sim_config

from .conftest import small_config


def _with_long_answers(every: int, chars: int) -> pa.Table:
    t = generate_table(rows_per_source=12, seed=0)
    rm = t.column("reward_model").combine_chunks()
    gt = rm.field("ground_truth").to_pylist()
    gt = ["7" * chars if i % every == 0 else g for i, g in enumerate(gt)]
    cols = {n: t.column(n).combine_chunks() for n in t.column_names}
    cols["reward_model"] = pa.StructArray.from_arrays([rm.field("style"), pa.array(gt)], names=["style", "ground_truth"])
    return pa.table(cols)


def test_answers_longer_than_max_response_length_are_cut_and_wrong(tmp_path):
    data = SimDataset.from_table(_with_long_answers(every=2, chars=20_000))
    assert data.target.dtype == object and len(data.target[0]) == 20_000  # Python strings, not fixed-width text
    cfg = small_config(tmp_path, run={"n": 8}, simulate={"max_response_length": 64,
                                                         "learner": {"initial_skill": 2.0, "malformed_rate": 0.0}})
    eng = SimEngine(load_sim_config(cfg), data, run_dir=tmp_path / "r")
    gen = eng.driver.generation(1, eng).trajectories
    lengths = np.array([len(r) for r in gen["response"].tolist()])
    long = np.array([len(t) > 1000 for t in gen["target"].tolist()])
    assert long.any() and (~long).any()
    assert lengths.max() <= 4 * 64 and (gen["response_length"] <= 65).all()
    assert (gen["acc"][long] == 0).all()  # never written in full: wrong, however skilled
    assert gen["acc"][~long].mean() > 0.5  # the others are answered as before


def test_numeric_answers_still_read_as_text():
    t = generate_table(rows_per_source=3, seed=0)
    cols = {n: t.column(n).combine_chunks() for n in t.column_names if n != "reward_model"}
    cols["answer"] = pa.array([float(i) for i in range(t.num_rows)])
    data = SimDataset.from_table(pa.table(cols))
    assert data.target.dtype == object and data.target[2] == "2.0"

"""The generated dataset (verl layout) and reading a user's parquet, with its errors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlhooks.core.data import DataError, DatasetColumns
from rlhooks.engines.sim.data import SOURCE_PROFILES, SimDataset, generate_table, write_dataset


def test_generated_layout_is_verl_and_answers_are_right(tmp_path):
    path = write_dataset(tmp_path / "d.parquet", rows_per_source=200, seed=3)
    table = pq.read_table(path)
    assert set(table.column_names) >= {"prompt", "data_source", "reward_model", "extra_info", "ability"}
    row = table.slice(0, 1).to_pylist()[0]
    assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"].startswith("What is")
    assert set(row["reward_model"]) == {"style", "ground_truth"}
    assert {"complexity_score", "index"} <= set(row["extra_info"])
    # samplers read the same file through core's DatasetColumns
    cols = DatasetColumns.from_parquet(path)
    assert cols.source_names == tuple(sorted(SOURCE_PROFILES))
    assert cols.source_counts() == {s: 200 for s in SOURCE_PROFILES}
    assert np.all((cols.complexity >= 0) & (cols.complexity <= 1))
    # the worked solution ends with the ground truth (independently re-evaluated for sums/products)
    ds = SimDataset.from_parquet(path)
    for i in range(0, len(ds), 37):
        assert ds.solution[i].endswith(ds.target[i])
        q = ds.prompt[i]
        if q.startswith("What is "):
            expr = q[len("What is "): q.index("?")]
            assert str(eval(expr)) == ds.target[i]  # noqa: S307 - our own generated arithmetic


def test_sources_have_different_difficulty_profiles():
    ds = SimDataset.from_table(generate_table(400, 0))
    med = {name: float(np.median(ds.difficulty[ds.source_codes == i])) for i, name in enumerate(ds.source_names)}
    assert med["arith_add"] < med["arith_mul"] < med["chain"]


def test_generation_is_deterministic():
    assert generate_table(50, 1).equals(generate_table(50, 1))
    assert not generate_table(50, 1).equals(generate_table(50, 2))


def test_user_parquet_with_string_prompt_and_answer_column(tmp_path):
    path = tmp_path / "user.parquet"
    pq.write_table(pa.table({
        "prompt": ["2+2?", "capital of France?", "3*3?"],
        "data_source": ["math", "geo", "math"],
        "answer": ["4", "Paris", "9"],
    }), path)
    ds = SimDataset.from_parquet(path)
    assert list(ds.prompt) == ["2+2?", "capital of France?", "3*3?"]
    assert list(ds.target) == ["4", "Paris", "9"]
    assert np.isnan(ds.numeric_target[1]) and ds.numeric_target[2] == 9
    assert np.all(ds.difficulty == 0.5)  # no complexity_score: median difficulty


def test_missing_columns_are_named(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"question": ["x"], "label": ["y"]}), path)
    with pytest.raises(DataError) as err:
        SimDataset.from_parquet(path)
    msg = str(err.value)
    assert "bad.parquet" in msg and "'data_source'" in msg and "'prompt'" in msg and "ground_truth" in msg
    assert "question, label" in msg or "label, question" in msg


def test_null_answer_and_missing_file(tmp_path):
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"prompt": ["a", "b"], "data_source": ["s", "s"], "answer": ["1", None]}), path)
    with pytest.raises(DataError, match="1 rows have no answer \\(first at row 1\\)"):
        SimDataset.from_parquet(path)
    with pytest.raises(DataError, match="does not exist"):
        SimDataset.from_parquet(tmp_path / "nope.parquet")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="not a readable parquet file"):
        SimDataset.from_parquet(tmp_path / "junk.parquet")

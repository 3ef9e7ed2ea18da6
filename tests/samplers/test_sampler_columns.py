"""Samplers declare dataset columns beyond data_source and complexity (issue 32, item 11): read once,
as float32 columns, when the engine builds the sampler; a sampler that uses them passes the kit."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlhooks import DataError, DatasetColumns, Sampler
from rlhooks.core.config import ComponentConfig
from rlhooks.core.data import prompt_chars, read_parquet_columns
from rlhooks.core.manager import RunManager
from rlhooks.engines.sim.data import SimDataset, write_dataset
from rlhooks.engines.sim.engine import SimEngine, load_sim_config
from rlhooks.testing import SamplerContract


class ShortestFirst(Sampler):
    """Draws the rows with the fewest prompt characters first, easier (lower difficulty) rows breaking ties."""

    columns = ("prompt_chars", "extra_info.difficulty")

    def __init__(self, options: Any, data: DatasetColumns, *, batch_size: int, seed: int = 0) -> None:
        super().__init__(options, data, batch_size=batch_size, seed=seed)
        difficulty = np.nan_to_num(data.column("extra_info.difficulty"), nan=np.inf)
        length = np.nan_to_num(data.column("prompt_chars"), nan=np.inf)
        self.order = np.lexsort((difficulty, length))  # vectorized over every row
        self.pos = 0

    def __iter__(self) -> Iterator[int]:
        while self.pos < len(self.order):
            self.pos += 1
            yield int(self.order[self.pos - 1])
        self.pos = 0

    def __len__(self) -> int:
        return len(self.order)

    def state_dict(self) -> dict[str, Any]:
        return {"pos": self.pos}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.pos = int(state["pos"])


class TestShortestFirstContract(SamplerContract):
    plugin_class = ShortestFirst  # collects only the hooks it implements (no skips)

    @pytest.fixture
    def component(self):
        return ShortestFirst


@pytest.fixture(scope="module")
def dataset_file(tmp_path_factory) -> str:
    """The simulator's generated data plus an extra_info.difficulty field (one row without one)."""
    path = write_dataset(tmp_path_factory.mktemp("cols") / "data.parquet", rows_per_source=30, seed=0)
    table = pq.read_table(path)
    info = table.column("extra_info").combine_chunks()
    difficulty = pa.array([None if i == 3 else float(i % 7) for i in range(table.num_rows)], pa.float64())
    fields = [info.field(i) for i in range(info.type.num_fields)] + [difficulty]
    names = [info.type.field(i).name for i in range(info.type.num_fields)] + ["difficulty"]
    table = table.set_column(table.schema.get_field_index("extra_info"), "extra_info",
                             pa.StructArray.from_arrays(fields, names=names))
    pq.write_table(table, path)
    return str(path)


def _expected_chars(path: str) -> np.ndarray:
    prompts = pq.read_table(path, columns=["prompt"]).column("prompt").to_pylist()
    return np.array([sum(len(m["content"]) for m in p) if isinstance(p, list) else len(p) for p in prompts], np.float32)


def test_a_sampler_declaring_columns_gets_them_in_a_simulated_run(dataset_file, tmp_path):
    data = SimDataset.from_parquet(dataset_file)
    config = load_sim_config({"run": {"steps": 2, "train_batch_size": 8, "n": 2, "out_dir": str(tmp_path)},
                              "rewards": ["check_answer"]})
    # the sampler's config entry as the registry would give it, without installing a package for it
    comp = ComponentConfig(kind="sampler", name="shortest_first", path="sampler", options=None, on_error="raise",
                           obj=ShortestFirst, distribution="tests")
    config = attrs.evolve(config, sampler=comp)
    engine = SimEngine(config, data, manager=RunManager(config, run_dir=tmp_path / "r"))
    got = engine.sampler.data  # the engine's data held no declared column: read from its parquet file
    np.testing.assert_array_equal(got.column("prompt_chars"), _expected_chars(dataset_file))
    difficulty = got.column("extra_info.difficulty")
    assert difficulty.dtype == np.float32 and np.isnan(difficulty[3])
    np.testing.assert_array_equal(np.delete(difficulty, 3), np.delete(np.arange(len(data)) % 7, 3).astype(np.float32))
    engine.run()
    assert engine.step == 2


def test_prompt_chars_of_strings_and_chat_lists_in_slices():
    chat = pa.array([[{"role": "user", "content": "abc"}, {"role": "system", "content": None}], [],
                     [{"role": "user", "content": "日本"}]])
    assert prompt_chars(chat, "t").tolist() == [3.0, 0.0, 2.0]
    assert prompt_chars(pa.array(["", None, "héllo"]), "t").tolist() == [0.0, 0.0, 5.0]


def test_declared_column_errors_name_the_file_the_column_and_what_exists(dataset_file, tmp_path):
    with pytest.raises(DataError, match=r"'extra_info' has no field 'level' for the declared column 'extra_info.level' \(fields: .*difficulty"):
        read_parquet_columns(dataset_file, ["extra_info.level"])
    with pytest.raises(DataError, match=r"declared column 'data_source' has type .*string.*only numeric"):
        read_parquet_columns(dataset_file, ["data_source"])
    with pytest.raises(DataError, match="column 'nope' was not loaded .* columns = \\('nope',\\)"):
        DatasetColumns.from_arrays(["a"]).column("nope")

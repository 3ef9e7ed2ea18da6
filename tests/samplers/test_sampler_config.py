"""The spec's YAML examples load through rlhooks.host.load_config and run unchanged; names; manager wiring."""

from __future__ import annotations

import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import structlog
from .sampler_helpers import Stream, trajectories, two_sources

from rlhooks import ConfigError
from rlhooks.host import RunManager, load_config
from rlhooks.core.data import DataError
from rlhooks.core.registry import Registry
from rlhooks.plugins.samplers.curriculum import RewardCurriculumSampler, TimeCurriculumSampler
from rlhooks.plugins.samplers.multi_source import MultiSourceSampler

# The five "Usage Examples" of shared/spec/multi_source_samplers.md, verbatim.
SPEC_EXAMPLES = {
    "1_fixed": """
        sampler:
          class_name: MultiSourceSampler
          sampling_strategy: weighted
          source_weights:
            iftrain: 1.0
            logicif: 1.0
        """,
    "2_adaptive": """
        sampler:
          class_name: MultiSourceSampler
          sampling_strategy: weighted
          source_weights:
            iftrain: 1.0
            logicif: 1.0
          adaptive_weights: true
          alpha: 0.1
          temperature: 0.3
          max_source_ratio: 3.0
        """,
    "3_time_adaptive": """
        sampler:
          class_name: TimeCurriculumSampler
          sampling_strategy: weighted
          source_weights:
            iftrain: 1.0
            logicif: 1.0
          adaptive_weights: true
          alpha: 0.1
          complexity_source: logicif
          initial_complexity_percentile: 30
          final_complexity_percentile: 100
          complexity_warmup_steps: 100
        """,
    "4_reward_gated": """
        sampler:
          class_name: RewardCurriculumSampler
          sampling_strategy: weighted
          source_weights:
            iftrain: 1.0
            logicif: 1.0
          complexity_source: logicif
          initial_complexity_percentile: 20
          final_complexity_percentile: 80
          num_intervals: 10
          reward_threshold: 0.125
          reward_alpha: 0.1
          min_batches_per_level: 20
          check_frequency: 5
        """,
    "5_focus_new": """
        sampler:
          class_name: RewardCurriculumSampler
          sampling_strategy: weighted
          source_weights:
            iftrain: 1.0
            logicif: 1.0
          complexity_source: logicif
          initial_complexity_percentile: 20
          final_complexity_percentile: 100
          num_intervals: 10
          reward_threshold: 0.125
          # Focus more on newly unlocked intervals
          focus_new_intervals: true
          interval_decay: 0.5  # Older intervals have 50% less weight per level
        """,
}
EXPECTED_CLASS = {"1_fixed": MultiSourceSampler, "2_adaptive": MultiSourceSampler, "3_time_adaptive": TimeCurriculumSampler,
                  "4_reward_gated": RewardCurriculumSampler, "5_focus_new": RewardCurriculumSampler}


def write(tmp_path, text: str, name: str = "run.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("example", list(SPEC_EXAMPLES))
def test_spec_examples_load_and_run(tmp_path, example: str) -> None:
    cfg = load_config(write(tmp_path, SPEC_EXAMPLES[example]))
    assert cfg.sampler.obj is EXPECTED_CLASS[example]
    data = two_sources(n_each=500)
    manager = RunManager(cfg, run_dir=tmp_path / "run")
    sampler = manager.build_sampler(data, batch_size=64, seed=0)
    assert isinstance(sampler, EXPECTED_CLASS[example])
    stream = Stream(sampler)
    for step in range(1, 31):
        idx = stream.take(64)
        # logicif is the hard source: reward 0.2 (above the examples' 0.125 threshold), iftrain 0.9
        batch = trajectories(data, idx, lambda src, i: np.where(src == "logicif", 0.2, 0.9))
        metrics = manager.rewards_computed(step, batch)  # through the hook bus, as a run does
        assert metrics["sampler/weight/logicif"] > 0
    if example == "2_adaptive":
        assert sampler.weights["logicif"] == pytest.approx(0.75)
    if example == "3_time_adaptive":
        assert metrics["curriculum/percentile"] == pytest.approx(30 + 70 * 30 / 100)
    if example == "4_reward_gated":
        assert metrics["curriculum/level"] == 1  # min_batches_per_level 20, checked every 5 -> up at batch 20
    if example == "5_focus_new":
        assert metrics["curriculum/level"] == 2  # defaults min 10, check every 3 -> level-ups at batches 12 and 24


def test_class_path_of_verl_extensions_maps_to_builtins(tmp_path) -> None:
    cfg = load_config(write(tmp_path, """
        sampler:
          class_path: pkg://verl_extensions.multi_source_sampler
          class_name: TimeCurriculumSampler
          complexity_warmup_steps: 10
        """))
    assert cfg.sampler.obj is TimeCurriculumSampler


@pytest.mark.parametrize("old,new,cls", [
    ("CurriculumMultiSourceSampler", "TimeCurriculumSampler", TimeCurriculumSampler),
    ("RewardGatedCurriculumSampler", "RewardCurriculumSampler", RewardCurriculumSampler),
])
def test_deprecated_names_work_with_a_warning(old: str, new: str, cls) -> None:
    with structlog.testing.capture_logs() as logs:
        cfg = load_config({"sampler": {"class_name": old, "reward_threshold": 0.1} if cls is RewardCurriculumSampler
                           else {"class_name": old}})
    assert cfg.sampler.obj is cls
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert any(f"{old!r} is deprecated; use {new!r}" in e["event"] for e in warnings)
    with structlog.testing.capture_logs() as logs:
        load_config({"sampler": {"name": new, "reward_threshold": 0.1} if cls is RewardCurriculumSampler else new})
    assert not [e for e in logs if "deprecated" in e["event"]]


@pytest.mark.parametrize("name,cls", [
    ("MultiSourceSampler", MultiSourceSampler), ("multi_source", MultiSourceSampler),
    ("TimeCurriculumSampler", TimeCurriculumSampler), ("time_curriculum", TimeCurriculumSampler),
    ("RewardCurriculumSampler", RewardCurriculumSampler), ("reward_curriculum", RewardCurriculumSampler),
])
def test_registry_names(name: str, cls) -> None:
    assert Registry().resolve("sampler", name) is cls


def test_reward_threshold_missing_is_a_config_error(tmp_path) -> None:
    path = write(tmp_path, """
        sampler:
          class_name: RewardCurriculumSampler
          complexity_source: logicif
          num_intervals: 10
        """)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert str(path) in msg and "sampler (RewardCurriculumSampler): required option 'reward_threshold' is missing" in msg


def test_config_reports_every_bad_sampler_option(tmp_path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, """
            sampler:
              class_name: TimeCurriculumSampler
              source_weights: {iftrain: 0, logicif: 1}
              temprature: 0.3
              initial_complexity_percentile: 90
              final_complexity_percentile: 50
            """))
    msg = str(err.value)
    assert "sampler.source_weights (TimeCurriculumSampler): every weight must be a finite number > 0; got iftrain: 0.0" in msg
    assert "option 'temprature' is not known; did you mean 'temperature'?" in msg
    with pytest.raises(ConfigError, match=r"initial_complexity_percentile \(90\) must be <= final"):
        load_config({"sampler": {"name": "time_curriculum", "initial_complexity_percentile": 90,
                                 "final_complexity_percentile": 50}})


def test_sampler_errors_in_the_manager_name_the_plugin(tmp_path) -> None:
    cfg = load_config({"sampler": {"name": "multi_source", "source_weights": {"nope": 1.0}}})
    manager = RunManager(cfg, run_dir=tmp_path)
    with pytest.raises(Exception, match=r"plugin 'multi_source'.*failed in __init__.*'nope'"):
        manager.build_sampler(two_sources(n_each=5), batch_size=4)


# -- parquet ----------------------------------------------------------------------------------------

def write_parquet(path, sources, complexity) -> None:
    extra = pa.StructArray.from_arrays([pa.array(complexity, pa.float64()), pa.array(["x"] * len(sources))],
                                       ["complexity_score", "other"])
    pq.write_table(pa.table({"data_source": pa.array(sources), "prompt": ["p"] * len(sources), "extra_info": extra}),
                   path, row_group_size=7)


def test_from_parquet_builds_from_columns(tmp_path) -> None:
    path = tmp_path / "train.parquet"
    src = ["logicif", "iftrain", "iftrain", "logicif"] * 10
    comp = np.linspace(0, 1, 40)
    write_parquet(path, src, comp)
    s = RewardCurriculumSampler.from_parquet(path, {"reward_threshold": 0.2, "initial_complexity_percentile": 50},
                                             batch_size=8, seed=0)
    idx = Stream(s).take(80)
    assert set(np.asarray(src)[idx].tolist()) == {"iftrain", "logicif"}
    logic = idx[np.asarray(src)[idx] == "logicif"]
    assert comp[logic].max() <= np.median(comp[np.asarray(src) == "logicif"]) + 1e-9  # the easiest 50% only
    m = MultiSourceSampler.from_parquet(path, {"source_weights": {"iftrain": 3, "logicif": 1}}, batch_size=8)
    assert m.weights == {"iftrain": 0.75, "logicif": 0.25}


def test_from_parquet_bad_rows(tmp_path) -> None:
    path = tmp_path / "nulls.parquet"
    write_parquet(path, ["a", None, "logicif", None], [0.1, 0.2, 0.3, 0.4])
    with pytest.raises(DataError, match=r"2 rows have a null data_source \(first at row 1\)"):
        MultiSourceSampler.from_parquet(path, batch_size=2)
    path = tmp_path / "nocomp.parquet"
    write_parquet(path, ["iftrain", "logicif", "logicif", "logicif"], [0.1, None, 0.3, None])
    with pytest.raises(DataError, match=r"2 of 3 rows of curriculum source 'logicif' .* \(first at row 1\)"):
        TimeCurriculumSampler.from_parquet(path, batch_size=2)
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"data_source": ["iftrain", "logicif"]}), path)
    with pytest.raises(DataError, match="no extra_info.complexity_score column"):
        TimeCurriculumSampler.from_parquet(path, batch_size=2)
    assert len(MultiSourceSampler.from_parquet(path, batch_size=2)) == 2


def test_from_parquet_without_data_source_column(tmp_path) -> None:
    path = tmp_path / "nosource.parquet"
    pq.write_table(pa.table({"source": ["iftrain", "logicif"], "prompt": ["p", "q"]}), path)
    with pytest.raises(DataError, match=r"no 'data_source' column \(columns: prompt, source\)"):
        MultiSourceSampler.from_parquet(path, batch_size=2)

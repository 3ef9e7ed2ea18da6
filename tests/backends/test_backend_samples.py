"""Sample tables: selection against brute-force references, and real runs through the manager."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlhooks
import rlhooks.host
from rlhooks import Batch
from rlhooks.plugins.backends.samples import (
    PerSourceSamples,
    RandomSamples,
    TopBottomKSamples,
    bottom_k_positions,
    grouped_top_k_positions,
    top_k_positions,
)
from rlhooks.testing.contracts import OnRewardsComputedContract, OnRunStartContract, OnStepEndContract


def _ref_top(values: list[float], k: int) -> list[int]:
    """Reference: sort (value desc, position asc), NaN excluded."""
    pos = [i for i, v in enumerate(values) if v == v]
    return sorted(pos, key=lambda i: (-values[i], i))[:k]


values_st = st.lists(st.one_of(st.sampled_from([0.0, 1.0, 0.5, -1.0]), st.floats(-5, 5), st.just(float("nan"))),
                     max_size=60)


@settings(max_examples=300, deadline=None)
@given(values=values_st, k=st.integers(0, 10))
def test_top_and_bottom_k_match_reference(values: list[float], k: int) -> None:
    v = np.array(values, dtype=float)
    assert top_k_positions(v, k).tolist() == _ref_top(values, k)
    assert bottom_k_positions(v, k).tolist() == _ref_top([-x for x in values], k)


@settings(max_examples=200, deadline=None)
@given(values=values_st, k=st.integers(0, 4), data=st.data())
def test_grouped_top_k_matches_reference(values: list[float], k: int, data) -> None:
    codes = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(values), max_size=len(values))), dtype=np.int64)
    got = grouped_top_k_positions(np.array(values, dtype=float), codes, k).tolist()
    want = []
    for g in sorted(set(codes.tolist())):
        members = [i for i in range(len(values)) if codes[i] == g and values[i] == values[i]]
        want += sorted(members, key=lambda i: (-values[i], i))[:k]
    assert got == want


def _traj(step: int, gen: int, n_groups: int, n: int, rng: np.random.Generator, lazy_calls: list | None = None) -> Batch:
    rows = n_groups * n
    uid = np.repeat([f"s{step}g{gen}u{i}" for i in range(n_groups)], n)
    reward = rng.integers(0, 4, rows).astype(float) / 2  # many ties on purpose
    def response():
        if lazy_calls is not None:
            lazy_calls.append(rows)
        return np.array([f"resp {u} #{j}" for j, u in enumerate(uid)])
    return Batch(
        {"uid": uid, "index": np.arange(rows) + 1000 * gen, "data_source": np.where(np.arange(rows) % 3 == 0, "gsm8k", "math"),
         "reward": reward, "reward_fn/check_answer": reward * 2, "acc": reward > 0.5, "response_length": np.arange(rows) + 7},
        lazy={"response": response}, meta={"step": step, "generation": gen, "reward_extra_keys": ["acc"]},
    )


def _table_rows(path: Path, name: str) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "table" and r["name"] == name:
            out[r["step"]] = r["rows"]
    return out


def test_top_bottom_k_over_generation_batches_matches_brute_force(tmp_path: Path) -> None:
    cfg = rlhooks.host.load_config({"run": {"name": "s", "seed": 3}, "backends": ["jsonl"],
                               "samples": [{"name": "top_bottom_k", "k": 3}, {"name": "random_samples", "k": 5},
                                           {"name": "per_source_samples", "k": 1}]})
    m = rlhooks.host.RunManager(cfg, run_dir=tmp_path / "run")
    rng = np.random.default_rng(0)
    seen: dict[int, list[Batch]] = {}
    with m.running():
        for step in range(1, 5):
            batches = [_traj(step, g, 4, 4, rng) for g in (1, 2, 3)]
            for b in batches:
                m.rewards_computed(step, b)
            seen[step] = batches
            full = Batch.concat(batches)
            m.step_end(step, full, {})
            m.log_metrics(step, {"a": 1})
            m.dispatch_emitted()
    tables = _table_rows(tmp_path / "run" / "metrics.jsonl", "samples/top_bottom_k")
    assert sorted(tables) == [1, 2, 3, 4]
    for step, rows in tables.items():
        full = Batch.concat(seen[step])
        r = full["reward"].tolist()
        top = _ref_top(r, 3)
        rest = [i for i in range(len(r)) if i not in top]
        bottom = [rest[i] for i in _ref_top([-r[j] for j in rest], 3)]
        assert [x["index"] for x in rows] == [int(full["index"][i]) for i in top + bottom]
        assert [(x["selection"], x["rank"]) for x in rows] == [("top", 1), ("top", 2), ("top", 3),
                                                                 ("bottom", 1), ("bottom", 2), ("bottom", 3)]
        first = rows[0]
        assert list(first) == ["step", "selection", "rank", "uid", "index", "data_source", "response", "reward",
                               "reward_fn/check_answer", "acc", "response_length"]
        i = top[0]
        assert first["response"] == full["response"][i] and first["reward_fn/check_answer"] == 2 * r[i]
    random_tables = _table_rows(tmp_path / "run" / "metrics.jsonl", "samples/random")
    for step, rows in random_tables.items():
        assert len(rows) == 5 and len({x["uid"] + str(x["index"]) for x in rows}) == 5
        assert {x["selection"] for x in rows} == {"random"}
    per_source = _table_rows(tmp_path / "run" / "metrics.jsonl", "samples/per_source")
    for step, rows in per_source.items():
        full = Batch.concat(seen[step])
        for src in ("gsm8k", "math"):
            mine = [x for x in rows if x["data_source"] == src]
            r = np.where(full["data_source"] == src, full["reward"], np.nan).tolist()
            assert [x["index"] for x in mine if x["selection"] == "top"] == [int(full["index"][i]) for i in _ref_top(r, 1)]
            assert [x["reward"] for x in mine if x["selection"] == "bottom"] == [min(v for v in r if v == v)]


def test_random_samples_are_seeded() -> None:
    def draw(seed: int) -> list:
        s = RandomSamples(RandomSamples.Options(k=4, seed=seed))
        run = _Recorder()
        s.on_run_start(run)
        rng = np.random.default_rng(1)
        for g in (1, 2):
            s.on_rewards_computed(1, _traj(1, g, 8, 4, rng))
        s.on_step_end(1, Batch())
        return [(x["uid"], x["index"]) for x in run.tables[0][2]]
    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


class _Recorder:
    seed = 0

    def __init__(self) -> None:
        self.tables: list = []

    def log_table(self, name, rows, step=None):
        self.tables.append((step, name, rows))


def test_fewer_rows_than_2k_no_duplicates_and_lazy_text_untouched() -> None:
    s = TopBottomKSamples(TopBottomKSamples.Options(k=4))
    run = _Recorder()
    s.on_run_start(run)
    calls: list = []
    b = _traj(1, 1, 1, 5, np.random.default_rng(2), lazy_calls=calls)
    s.on_rewards_computed(1, b)
    s.on_step_end(1, b)
    rows = run.tables[0][2]
    assert sorted(x["index"] for x in rows) == list(range(1000, 1005))  # every row exactly once
    assert [x["selection"] for x in rows] == ["top"] * 4 + ["bottom"]
    assert b.is_lazy("response")  # the hook's batch was not materialized; only the selection was


def test_memory_stays_bounded_by_k() -> None:
    s = TopBottomKSamples(TopBottomKSamples.Options(top=2, bottom=1))
    s.on_run_start(_Recorder())
    rng = np.random.default_rng(3)
    for g in range(1, 30):
        s.on_rewards_computed(1, _traj(1, g, 16, 8, rng))
        assert len(s._cand.rows) <= 3


def test_trained_rows_and_missing_key_error() -> None:
    s = TopBottomKSamples(TopBottomKSamples.Options(k=1, key="advantage"))
    s.on_run_start(_Recorder())
    with pytest.raises(KeyError, match="'advantage' is not a column.*rows: trained"):
        s.on_rewards_computed(1, _traj(1, 1, 2, 2, np.random.default_rng(0)))
    s = TopBottomKSamples(TopBottomKSamples.Options(k=1, key="advantage", rows="trained", every=2))
    run = _Recorder()
    s.on_run_start(run)
    for step in (1, 2):
        b = _traj(step, 1, 2, 2, np.random.default_rng(0))
        b = b.with_columns(advantage=np.array([0.5, -1.0, 2.0, 0.0]))
        s.on_step_end(step, b)
    assert [(st_, [x["advantage"] for x in rows]) for st_, _, rows in run.tables] == [(2, [2.0, -1.0])]


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(rlhooks.ConfigError) as err:
        rlhooks.host.load_config({"samples": [{"name": "top_bottom_k", "k": -1, "rows": "all", "every": 0}]})
    text = str(err.value)
    assert "samples[0].k (top_bottom_k)" in text and "samples[0].rows (top_bottom_k)" in text
    assert "samples[0].every (top_bottom_k)" in text


for _contract in (OnRunStartContract, OnRewardsComputedContract, OnStepEndContract):
    for _cls_under_test in (TopBottomKSamples, RandomSamples, PerSourceSamples):
        _name = f"Test{_cls_under_test.__name__}{_contract.__name__}"
        globals()[_name] = type(_name, (_contract,), {"plugin": pytest.fixture(lambda self, c=_cls_under_test: c())})


def test_generated_rows_get_sample_id_policy_version_and_their_trained_advantage() -> None:
    """sample_level_logging.md's fields by default; advantage looked up in the trained rows by sample_id."""
    s = TopBottomKSamples(TopBottomKSamples.Options(k=2))
    run = _Recorder()
    s.on_run_start(run)

    def gen(g: int, rewards: list[float]) -> Batch:
        n = len(rewards)
        return Batch({"uid": np.repeat([f"u{g}a", f"u{g}b"], n // 2).astype(object), "index": np.arange(n),
                      "sample_id": np.array([f"u{g}{'ab'[i // (n // 2)]}/{i % (n // 2)}" for i in range(n)], dtype=object),
                      "policy_version": np.full(n, 4, dtype=np.int64), "reward": np.array(rewards)})

    first, second = gen(1, [1.0, 0.0, 5.0, 5.0]), gen(2, [9.0, 0.0, -3.0, -3.0])
    s.on_rewards_computed(5, first)
    s.on_rewards_computed(5, second)
    # the filters kept groups u1a and u2a; verl reordered the rows (balance_batch) before training
    trained = Batch({"sample_id": np.array(["u2a/1", "u1a/0", "u2a/0", "u1a/1"], dtype=object),
                     "advantage": np.array([-0.7, 0.7, 0.7, -0.7])})
    s.on_step_end(5, trained)
    rows = run.tables[0][2]
    by_id = {r["sample_id"]: r for r in rows}
    assert [r["sample_id"] for r in rows] == ["u2a/0", "u1b/0", "u2b/0", "u2b/1"]  # top 9, 5; bottom -3, -3
    assert list(rows[0])[3:6] == ["sample_id", "policy_version", "uid"]  # the document's order, after step/selection/rank
    assert all(r["policy_version"] == 4 for r in rows)
    assert by_id["u2a/0"]["advantage"] == 0.7  # trained: its advantage
    assert by_id["u1b/0"]["advantage"] is None and by_id["u2b/1"]["advantage"] is None  # filtered out: none

    # a table whose columns leave out advantage gets none added
    s = TopBottomKSamples(TopBottomKSamples.Options(k=1, columns=["sample_id", "reward"]))
    run = _Recorder()
    s.on_run_start(run)
    s.on_rewards_computed(5, first)
    s.on_step_end(5, trained)
    assert all(set(r) == {"step", "selection", "rank", "sample_id", "reward"} for r in run.tables[0][2])


def test_rows_of_an_asynchronous_engine_carry_their_policy_lag() -> None:
    s = TopBottomKSamples(TopBottomKSamples.Options(k=1))
    run = _Recorder()
    s.on_run_start(run)
    batch = Batch({"uid": np.array([0, 0, 1, 1]), "sample_id": np.arange(4), "reward": np.array([1.0, 0.0, 3.0, 2.0]),
                   "policy_version": np.array([4, 4, 2, 2]), "policy_lag": np.array([0, 0, 2, 2])})
    s.on_rewards_computed(5, batch)
    s.on_step_end(5, batch.with_columns(advantage=np.zeros(4)))
    rows = run.tables[0][2]
    assert list(rows[0])[3:7] == ["sample_id", "policy_version", "policy_lag", "uid"]
    assert {r["sample_id"]: r["policy_lag"] for r in rows} == {2: 2, 1: 0}  # top 3.0 (lag 2), bottom 0.0 (lag 0)

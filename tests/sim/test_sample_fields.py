"""Simulated sample tables carry the sample-logging document's sample_id, policy_version and advantage."""

from __future__ import annotations

import json

from .conftest import make_engine, small_config


def test_sim_sample_rows_have_id_version_and_advantage(tmp_path, small_data):
    cfg = small_config(tmp_path, run={"name": "samples", "steps": 3}, filters=["dapo"], backends=["jsonl"],
                       samples=[{"name": "top_bottom_k", "k": 4}, {"name": "random_samples", "k": 24}])
    engine = make_engine(cfg, small_data, tmp_path / "samples")
    engine.run()
    lines = [json.loads(x) for x in (tmp_path / "samples" / "metrics.jsonl").read_text().splitlines()]
    tables = {r["step"]: r["rows"] for r in lines if r["kind"] == "table" and r["name"] == "samples/top_bottom_k"}
    random_rows = [row for r in lines if r["kind"] == "table" and r["name"] == "samples/random" for row in r["rows"]]
    assert sorted(tables) == [1, 2, 3]
    ids = []
    for step, rows in tables.items():
        assert len(rows) == 8
        for r in rows:
            assert r["policy_version"] == step - 1 and r["sample_id"] // 4 == r["uid"]  # n = 4 per group
            assert r["advantage"] is None or isinstance(r["advantage"], float)
            ids.append(r["sample_id"])
    # seeded random rows: some trained (an advantage), some dropped by the filter (None)
    assert {type(r["advantage"]) for r in random_rows} == {float, type(None)}
    assert len(set(ids)) == len(ids)

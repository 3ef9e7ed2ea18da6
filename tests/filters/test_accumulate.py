"""Accumulation and trimming across generation batches: core StepDriver.collect with the dapo filter.

The Rollout below is a small real engine: prompts are dataset rows, each generation batch's
accuracies come from a script (one pattern per prompt), and its payload is a dict of arrays that
select/concat slice like an engine's own batch object would.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from rlhooks import Batch, GenerationLimitError, hookimpl
from rlhooks.host import RunManager, StepDriver, load_config

ALL1, ALL0, MIXED = "all1", "all0", "mixed"
PATTERN = {ALL1: [1.0, 1.0, 1.0], ALL0: [0.0, 0.0, 0.0], MIXED: [1.0, 0.0, 1.0]}
SOURCES = ("gsm8k", "math")


class ScriptedRollout:
    """Generation batch g has one prompt per entry of script[g]; prompt ids count up from 0."""

    def __init__(self, script: Sequence[Sequence[str]]):
        self.script = [list(s) for s in script]
        self.calls = 0
        self.next_prompt = 0

    def sample(self, step: int) -> tuple[dict, Batch]:
        kinds = self.script[self.calls % len(self.script)]
        self.calls += 1
        ids = np.arange(self.next_prompt, self.next_prompt + len(kinds))
        self.next_prompt += len(kinds)
        payload = {"prompt_id": ids, "kind": np.array(kinds, dtype=object)}
        prompts = Batch({"index": ids, "data_source": np.array([SOURCES[i % 2] for i in ids], dtype=object)})
        return payload, prompts

    def generate(self, step: int, payload: dict) -> tuple[dict, Batch]:
        ids = np.repeat(payload["prompt_id"], 3)
        acc = np.concatenate([PATTERN[k] for k in payload["kind"]])
        traj = {"prompt_id": ids, "acc": acc}
        batch = Batch(
            {
                "uid": np.array([f"p{i}" for i in ids], dtype=object),
                "index": ids,
                "data_source": np.array([SOURCES[i % 2] for i in ids], dtype=object),
                "reward": acc * 2.0,
                "acc": acc,
            },
            meta={"reward_extra_keys": ["acc"], "n": 3},
        )
        return traj, batch

    def select(self, payload: dict, rows: np.ndarray) -> dict:
        return {k: v[rows] for k, v in payload.items()}

    def concat(self, payloads: list[dict]) -> dict:
        return {k: np.concatenate([p[k] for p in payloads]) for k in payloads[0]}


class Recorder:
    """A real hook plugin recording what the driver logs."""

    def __init__(self) -> None:
        self.logged: list[tuple[int, dict]] = []

    @hookimpl
    def log_metrics(self, step, metrics):
        self.logged.append((step, dict(metrics)))


def make_driver(tmp_path: Path, **run) -> tuple[StepDriver, Recorder]:
    cfg = load_config({
        "run": {"name": "acc", "out_dir": str(tmp_path), "n": 3, **run},
        "filters": ["dapo"],
        "rewards": ["source_metrics"],
    })
    rec = Recorder()
    return StepDriver(RunManager(cfg, extra_plugins=[("recorder", rec)])), rec


def trained_prompts(collected) -> list[int]:
    return sorted(set(collected.payload["prompt_id"].tolist()))


def test_accumulates_until_enough_and_trims_surplus_in_arrival_order(tmp_path):
    # gen 1: prompts 0..3 -> kept 0, 2 ; gen 2: prompts 4..7 -> kept 5, 6, 7
    script = [[MIXED, ALL1, MIXED, ALL0], [ALL1, MIXED, MIXED, MIXED]]
    driver, _ = make_driver(tmp_path, train_batch_size=3, max_num_gen_batches=5)
    out = driver.collect(1, ScriptedRollout(script))
    assert trained_prompts(out) == [0, 2, 5]  # first 3 kept groups in arrival order
    assert len(out.batch) == 9 and out.payload["prompt_id"].tolist() == [0, 0, 0, 2, 2, 2, 5, 5, 5]
    np.testing.assert_array_equal(out.batch["index"], out.payload["prompt_id"])  # Batch and payload agree
    m = out.metrics
    assert m["train/num_gen_batches"] == 2
    assert m["filter/generated_groups"] == 8
    assert m["filter/kept_groups"] == 5
    assert m["filter/kept_ratio"] == pytest.approx(5 / 8)
    assert m["filter/trained_groups"] == 3
    assert m["filter/discarded_surplus"] == 2
    assert m["filter/limit_reached"] == 0
    # filter counts summed over both generation batches, not only the last
    assert m["filter/dropped_all_max"] == 2  # prompt 1 (gen 1) and prompt 4 (gen 2)
    assert m["filter/dropped_all_min"] == 1  # prompt 3
    assert m["filter/dropped_constant"] == 3


def test_exact_fill_has_no_surplus(tmp_path):
    script = [[MIXED, ALL1], [MIXED, MIXED]]
    driver, _ = make_driver(tmp_path, train_batch_size=3, max_num_gen_batches=0)
    out = driver.collect(1, ScriptedRollout(script))
    assert trained_prompts(out) == [0, 2, 3]
    assert out.metrics["filter/discarded_surplus"] == 0 and out.metrics["train/num_gen_batches"] == 2


def test_unlimited_generation_keeps_going(tmp_path):
    script = [[ALL1, ALL0]] * 6 + [[MIXED, MIXED]]
    driver, _ = make_driver(tmp_path, train_batch_size=2, max_num_gen_batches=0)
    out = driver.collect(1, ScriptedRollout(script))
    assert out.metrics["train/num_gen_batches"] == 7 and trained_prompts(out) == [12, 13]
    assert out.metrics["filter/dropped_all_max"] == 6 and out.metrics["filter/dropped_all_min"] == 6


def test_limit_raises_the_recipe_error_with_what_to_change(tmp_path):
    script = [[MIXED, ALL1, ALL0]]
    driver, _ = make_driver(tmp_path, train_batch_size=4, max_num_gen_batches=3)
    rollout = ScriptedRollout(script)
    with pytest.raises(GenerationLimitError) as e:
        driver.collect(1, rollout)
    assert isinstance(e.value, ValueError)  # what the recipe and the dynamic-sampling document raise
    msg = str(e.value)
    assert "num_gen_batches=3 >= max_num_gen_batches=3" in msg
    assert "only 3 of 9 generated groups" in msg and "on_gen_limit: continue" in msg
    assert rollout.calls == 3


def test_limit_continue_trains_on_what_was_kept(tmp_path):
    script = [[MIXED, ALL1, ALL0]]
    driver, _ = make_driver(tmp_path, train_batch_size=4, max_num_gen_batches=2, on_gen_limit="continue")
    out = driver.collect(1, ScriptedRollout(script))
    assert trained_prompts(out) == [0, 3]
    m = out.metrics
    assert (m["filter/limit_reached"], m["filter/trained_groups"], m["filter/kept_groups"]) == (1, 2, 2)
    assert m["train/num_gen_batches"] == 2 and m["filter/discarded_surplus"] == 0


def test_limit_continue_warns_once_per_streak_of_steps_at_the_limit(tmp_path):
    from structlog.testing import capture_logs

    driver, _ = make_driver(tmp_path, train_batch_size=4, max_num_gen_batches=2, on_gen_limit="continue")
    starved, plenty = ScriptedRollout([[MIXED, ALL1, ALL0]]), ScriptedRollout([[MIXED] * 4])
    with capture_logs() as logs:
        hit = [driver.collect(step, starved).metrics["filter/limit_reached"] for step in (1, 2, 3)]
        driver.collect(4, plenty)
        driver.collect(5, starved)
    assert hit == [1, 1, 1]  # every step at the limit is counted ...
    warned = [e["step"] for e in logs if e["event"].startswith("max_num_gen_batches reached")]
    assert warned == [1, 5]  # ... and warned about once per streak


def test_limit_continue_with_nothing_kept(tmp_path):
    driver, _ = make_driver(tmp_path, train_batch_size=2, max_num_gen_batches=2, on_gen_limit="continue")
    out = driver.collect(1, ScriptedRollout([[ALL1, ALL0]]))
    assert out.payload is None and len(out.batch) == 0
    assert out.metrics["filter/trained_groups"] == 0 and out.metrics["filter/kept_ratio"] == 0.0


def test_step_metrics_reach_log_metrics_with_source_counts(tmp_path):
    script = [[MIXED, ALL1, MIXED, ALL0], [ALL1, MIXED, MIXED, MIXED]]
    driver, rec = make_driver(tmp_path, train_batch_size=3, max_num_gen_batches=5)
    out = driver.collect(1, ScriptedRollout(script))
    merged = driver.finish_step(1, out.batch, out.metrics)
    assert rec.logged == [(1, merged)]
    # trained prompts 0, 2, 5 -> gsm8k (even ids) 0, 2; math 5
    assert merged["source/gsm8k/count"] == 6 and merged["source/math/count"] == 3
    # generated: prompts 0..7, four per source, three rows each
    assert merged["source/gsm8k/generated_count"] == 12 and merged["source/math/generated_count"] == 12
    # gsm8k generated prompts 0 (mixed), 2 (mixed), 4 (all1), 6 (mixed): acc = (2+2+3+2)/12
    assert merged["source/gsm8k/generated_acc"] == pytest.approx(9 / 12)
    assert merged["source/gsm8k/acc"] == pytest.approx(4 / 6)
    assert merged["source/math/reward"] == pytest.approx(2.0 * 2 / 3)

"""A third engine gets reward functions, their error counts, filters and step metrics from core.

``TinyEngine`` is a whole engine in ~30 lines: its own batch object is a dict of numpy arrays,
it generates text answers, and it implements only the Rollout's engine operations. Everything
else (scoring with the configured reward functions, reward_fn/<name> columns, error counts,
filters, accumulation, step metrics) comes from rlhooks.core's StepDriver.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlhooks import Batch, hookimpl
from rlhooks.host import RunManager, StepDriver, load_config
from rlhooks.plugins.rewards.functions import check_answer, format_exact

N = 4


class TinyEngine:
    """Prompt p asks for p; response i of a group answers correctly when i < p % (N + 1).
    A generation batch's first response is None (a broken decode): the built-in functions raise on it."""

    def __init__(self, prompts_per_batch: int = 3):
        self.k, self.next = prompts_per_batch, 0

    def sample(self, step: int) -> tuple[dict, Batch]:
        ids = np.arange(self.next, self.next + self.k)
        self.next += self.k
        return {"prompt": ids}, Batch({"index": ids, "data_source": np.where(ids % 2, "odd", "even").astype(object)})

    def select_prompts(self, payload: dict, rows: np.ndarray) -> dict:
        return {k: v[rows] for k, v in payload.items()}

    def generate(self, step: int, payload: dict) -> tuple[dict, Batch]:
        ids = np.repeat(payload["prompt"], N)
        right = np.tile(np.arange(N), len(payload["prompt"])) < ids % (N + 1)
        answer = np.where(right, ids, ids + 1).astype(str).astype(object)
        response = "<reasoning>\nthinking\n</reasoning>\n<answer>" + answer + "</answer>"
        response[0] = None
        own = right.astype(float)  # the engine's own verifier score
        traj = {"prompt": ids, "score": own}
        cols = {"uid": ids, "index": ids, "data_source": np.where(ids % 2, "odd", "even").astype(object),
                "reward": own, "response": response, "target": ids.astype(str).astype(object)}
        return traj, Batch(cols)

    def place_rewards(self, payload: dict, reward: np.ndarray) -> dict:
        return {**payload, "score": reward}

    def select(self, payload: dict, rows: np.ndarray) -> dict:
        return {k: v[rows] for k, v in payload.items()}

    def concat(self, payloads: list[dict]) -> dict:
        return {k: np.concatenate([p[k] for p in payloads]) for k in payloads[0]}


class Seen:
    def __init__(self) -> None:
        self.scored: list[Batch] = []
        self.logged: dict[int, dict] = {}

    @hookimpl
    def on_rewards_computed(self, step, batch):
        self.scored.append(batch)

    @hookimpl
    def log_metrics(self, step, metrics):
        self.logged[step] = dict(metrics)


def make(tmp_path: Path, rewards: list, filters: list) -> tuple[StepDriver, Seen]:
    cfg = load_config({"run": {"name": "tiny", "out_dir": str(tmp_path), "n": N, "train_batch_size": 4},
                       "rewards": rewards, "filters": filters})
    seen = Seen()
    return StepDriver(RunManager(cfg, extra_plugins=[("seen", seen)])), seen


def test_a_third_engine_gets_rewards_error_counts_and_filters_from_core(tmp_path):
    rewards = ["format_exact", {"name": "check_answer", "weight": 2.0, "error_score": -5.0}]
    driver, seen = make(tmp_path, rewards, [{"name": "dapo", "metric": "seq_reward"}])
    engine = TinyEngine()
    collected = driver.collect(1, engine)
    merged = driver.finish_step(1, collected.batch, collected.metrics)

    # every generated batch was scored by the driver: reward_fn columns, total, broken rows at error_score
    assert len(seen.scored) >= 2
    for b in seen.scored:
        resp, target = b["response"], b["target"]
        ok = np.array([r is not None for r in resp])
        exact = np.array([check_answer(r, t) if r is not None else -5.0 for r, t in zip(resp, target)])
        fmt = np.array([format_exact(r, t) if r is not None else 0.0 for r, t in zip(resp, target)])
        np.testing.assert_allclose(b["reward_fn/check_answer"], exact)
        np.testing.assert_allclose(b["reward_fn/format_exact"], fmt)
        np.testing.assert_allclose(b["reward"], fmt + 2.0 * exact)
        assert b.meta["reward_functions"] == ("format_exact", "check_answer") and not ok.all()
    # error counts: every broken row of every generation batch of the step, reported by the driver
    broken = sum(int(np.sum([r is None for r in b["response"]])) for b in seen.scored)
    assert merged["rewards/errors/check_answer"] == broken == merged["rewards/errors/format_exact"]
    assert seen.logged[1]["rewards/errors/check_answer"] == broken
    # the total went into the engine's own object too, row for row with the trimmed Batch
    np.testing.assert_array_equal(collected.payload["score"], collected.batch["reward"])
    np.testing.assert_array_equal(collected.payload["prompt"], collected.batch["index"])
    # filters: constant-reward groups dropped, counts summed over the generation batches
    kept = collected.batch
    assert (kept.groups.std(kept["reward"]) > 0).all() and kept.groups.n_groups == 4
    # prompts 0-2 kept (0 by its broken row); of 3-5, 4 (all right) and 5 (all wrong) are constant
    assert merged["train/num_gen_batches"] == 2 and merged["filter/generated_groups"] == 6
    assert merged["filter/trained_groups"] == 4 and merged["filter/dropped_constant"] == 2
    assert collected.batch["index"].tolist() == [0] * N + [1] * N + [2] * N + [3] * N
    assert merged["filter/kept_groups"] + merged["filter/dropped_constant"] == merged["filter/generated_groups"]


def test_without_reward_functions_the_engines_own_reward_stays(tmp_path):
    driver, seen = make(tmp_path, [], [])
    collected = driver.collect(1, TinyEngine())
    b = seen.scored[0]
    assert not any(c.startswith("reward_fn/") for c in b.columns)
    np.testing.assert_array_equal(b["reward"], np.tile(np.arange(N), 3) < np.repeat(np.arange(3), N) % (N + 1))
    assert not any(k.startswith("rewards/errors/") for k in collected.metrics)


def test_select_prompts_restricts_the_payload_before_generation(tmp_path):
    engine = TinyEngine(prompts_per_batch=4)
    payload, _ = engine.sample(1)
    payload = engine.select_prompts(payload, np.array([1, 3]))
    _, traj = engine.generate(1, payload)
    assert traj["index"].tolist() == [1] * N + [3] * N


def test_an_engine_without_text_columns_gets_a_clear_error(tmp_path):
    class NoText(TinyEngine):
        def generate(self, step, payload):
            traj, batch = super().generate(step, payload)
            return traj, Batch({c: batch[c] for c in ("uid", "index", "reward")})

    driver, _ = make(tmp_path, ["format_exact"], [])
    with pytest.raises(Exception, match=r"reward functions format_exact need the trajectories' response and "
                                        r"target column\(s\), which the engine \(NoText\) did not provide"):
        driver.collect(1, NoText())


def test_prompt_filters_of_an_engine_that_attached_no_data_get_a_clear_error(tmp_path):
    from rlhooks import DatasetColumns

    cfg = load_config({"run": {"name": "tiny", "out_dir": str(tmp_path), "n": N, "train_batch_size": 2},
                       "prompt_filters": ["selective_rollout"]})
    driver = StepDriver(RunManager(cfg))
    with pytest.raises(Exception, match=r"prompt filters \('selective_rollout' at prompt_filters\[0\]\) need the run's "
                                        r"prompt-level learning state, which the engine \(TinyEngine\) did not attach: "
                                        r"call manager.attach_data"):
        driver.collect(1, TinyEngine())
    # attached, the same engine runs with the pre-generation stage
    driver.manager.attach_data(DatasetColumns.from_arrays(["even", "odd"] * 50))
    collected = driver.collect(2, TinyEngine())
    assert collected.batch.groups.n_groups == 2

"""Exact resume of the rlhooks state on verl's V1 trainer, on the CPU learner (all of V1's own code, Ray local).

Each fixture makes two runs on the session's shared Ray (``cpu_v1_ray``): 3 steps straight with checkpoints
at steps 2 and 3, and a run resumed from a copy of the step-2 checkpoint. Per-step data comes from the runs'
own outputs: the rlhooks jsonl backend (the step metrics; two ``top_bottom_k`` tables with ``k`` above any
step's row count, i.e. every generated row, before the filters, and every trained row), verl's rollout dump
(``trainer.rollout_data_dir``: the trained trajectories by TransferQueue key) and ``rlhooks.pt``.

* ``rlhooks_sync`` with verl's ``algorithm.filter_groups`` (the rlhooks dapo filter) and the ``multi_source``
  sampler: the resumed step 3 is the straight run's step 3: the same prompts generated (uids, rows,
  rewards), the same groups trained, the same rlhooks metrics and an equal ``rlhooks.pt``.
* the async modes' pairs are in ``test_v1_resume_async.py`` (its own file, so pytest-xdist's ``--dist loadfile``
  runs them beside this one in the slow suite).

Slow: two V1 runs (sync 357 + 343 s on this 2-core machine under load before the CPU rollout server batched its
requests; see docs/DEVELOPMENT.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")
pytest.importorskip("transformers")

from omegaconf import OmegaConf, open_dict  # noqa: E402

from .test_cpu_v1_learner import _release_the_runs_resources, v1_config  # noqa: E402

pytestmark = [pytest.mark.verl, pytest.mark.slow]

ALL_ROWS = 10_000  # a top_bottom_k k above any step's row count: the table lists every row once
COLUMNS = ["sample_id", "uid", "index", "reward", "advantage"]
GENERATED, TRAINED = "samples/generated", "samples/trained"


MULTI_SOURCE = {"name": "multi_source", "adaptive_weights": True}
#: the sampler of the separate_async pair: a schedule counted in feedback batches, so a resume that lost the
#: count would start the curriculum over (a long warm-up keeps every step of it below 100%)
TIME_CURRICULUM = {"name": "time_curriculum", "complexity_source": "add_carry", "initial_complexity_percentile": 30,
                   "complexity_warmup_steps": 50}


def _config(assets, out: Path, *extra: str, sampler: dict = MULTI_SOURCE):
    from rlhooks.engines.verl.main import select_v1_parts

    cfg = v1_config(assets, out, "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
                    f"trainer.rollout_data_dir={out / 'rollouts'}", "trainer.logger=[console]", *extra)
    tables = [{"name": "top_bottom_k", "k": ALL_ROWS, "columns": COLUMNS, "table": GENERATED, "rows": "generated"},
              {"name": "top_bottom_k", "k": ALL_ROWS, "columns": COLUMNS, "table": TRAINED, "rows": "trained"}]
    with open_dict(cfg):
        cfg.rlhooks = OmegaConf.create({
            "run": {"out_dir": str(out / "runs"), "name": "resume"}, "sampler": sampler,
            "rewards": ["source_metrics", "reward_monitor"], "samples": tables, "backends": ["jsonl"]})
        select_v1_parts(cfg, [])
    return cfg


class Run:
    """What one run left: metrics and tables per step (rlhooks jsonl), trained trajectories per step (verl's
    rollout dump), rlhooks.pt per checkpoint."""

    def __init__(self, out: Path, wall_s: float):
        self.out, self.wall_s = out, wall_s
        self.metrics: dict[int, dict[str, Any]] = {}
        self.tables: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for line in (out / "runs" / "resume" / "metrics.jsonl").read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "metrics":
                self.metrics[record["step"]] = record["metrics"]
            elif record["kind"] == "table":
                self.tables[record["name"], record["step"]] = record["rows"]
        self.rollouts = {int(p.stem): [json.loads(x) for x in p.read_text().splitlines()]
                         for p in sorted((out / "rollouts").glob("*.jsonl"))}

    def state(self, step: int) -> dict[str, Any]:
        import torch

        return torch.load(self.out / "ckpt" / f"global_step_{step}" / "rlhooks.pt", weights_only=False)

    def generated(self, step: int) -> list[tuple]:
        """(uid, session, dataset row, reward) of every row generated and scored in ``step``."""
        return sorted((r["uid"], r["sample_id"], r["index"], r["reward"]) for r in self.tables.get((GENERATED, step), []))

    def generated_groups(self, step: int) -> dict[str, tuple]:
        """uid -> (dataset row, the group's rewards sorted) of the groups generated in ``step``. Which session
        of a group gets which response is left out: verl's agent loop sends a group's n identical requests
        at once and the server, seeding each by its content and how many such came before, sees them in the
        order they arrive (the group's responses are the same set, see docs/how-to/verl.md)."""
        groups: dict[str, list] = {}
        for r in self.tables.get((GENERATED, step), []):
            groups.setdefault(r["uid"], []).append((r["index"], r["reward"]))
        return {uid: (rows[0][0], sorted(reward for _, reward in rows)) for uid, rows in groups.items()}

    def trained_uids(self, step: int) -> list[str]:
        """The groups verl trained in ``step`` (its rollout dump: TransferQueue keys ``uid_session_index``)."""
        return sorted({row["uid"].split("_")[0] for row in self.rollouts.get(step, [])})

    def trained_responses(self, step: int) -> dict[str, list]:
        """uid -> the group's (prompt, response, score) sorted, as verl dumped the trained batch."""
        groups: dict[str, list] = {}
        for row in self.rollouts.get(step, []):
            groups.setdefault(row["uid"].split("_")[0], []).append((row["input"], row["output"], row["score"]))
        return {uid: sorted(rows) for uid, rows in groups.items()}


def _run(cfg, out: Path) -> Run:
    import time

    from ray.util import placement_group_table

    from rlhooks.engines.verl.cpu import runner
    from rlhooks.engines.verl.v1.runner import RLHooksTaskRunnerV1

    before = set(placement_group_table())
    start = time.monotonic()
    try:
        runner.run(cfg, RLHooksTaskRunnerV1)
    finally:
        _release_the_runs_resources(before)
    return Run(out, time.monotonic() - start)


def _straight_and_resumed(tmp_path_factory, name: str, *extra: str, sampler: dict = MULTI_SOURCE) -> tuple[Run, Run]:
    from rlhooks.engines.verl.cpu import runner

    out = tmp_path_factory.mktemp(name)
    assets = runner.prepare(out / "tiny")
    straight = _run(_config(assets, out / "straight", *extra, sampler=sampler), out / "straight")
    shutil.copytree(out / "straight" / "ckpt" / "global_step_2", out / "resumed" / "ckpt" / "global_step_2")
    (out / "resumed" / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = _run(_config(assets, out / "resumed", *extra, sampler=sampler), out / "resumed")
    print(f"\n{name}: straight run {straight.wall_s:.0f} s, resumed run {resumed.wall_s:.0f} s")
    return straight, resumed


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two saved states differ: arrays by value and dtype, integers and strings exactly, floats to 1e-9
    (a statistic over a group's rows, summed in session order, may differ in the last bits; see generated_groups)."""
    import math

    import torch

    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: only in one" for k in a.keys() ^ b.keys()]
        return out + [d for k in a.keys() & b.keys() for d in differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return [] if a.dtype == b.dtype and torch.equal(a, b) else [f"{path}: tensors differ"]
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return [] if a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f") else [f"{path}: arrays differ"]
    if isinstance(a, float) and isinstance(b, float):
        same = (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return [] if same else [f"{path}: {a!r} vs {b!r}"]
    return [] if type(a) is type(b) and a == b else [f"{path}: {a!r} vs {b!r}"]


def learning_counts(state: dict[str, Any]) -> np.ndarray:
    """How many groups of each dataset row the run's learning state has seen (``times_sampled``)."""
    from rlhooks.core.learning import _decode
    from rlhooks.core.manager import LEARNING_KEY

    return _decode(state["components"][LEARNING_KEY]["learning"]["times_sampled"]).astype(np.int64)


# -- rlhooks_sync with filtering: the resumed step is the straight run's -----------------------------------


@pytest.fixture(scope="module")
def sync_runs(cpu_v1_ray, tmp_path_factory):
    return _straight_and_resumed(tmp_path_factory, "sync")


def test_the_straight_run_filters_and_trains_in_waves(sync_runs):
    straight, _ = sync_runs
    assert sorted(straight.metrics) == [1, 2, 3]
    evicted = 0
    for step, m in straight.metrics.items():
        generated = straight.generated(step)
        assert len({g[0] for g in generated}) == m["filter/generated_groups"]  # the table holds every generated group
        assert straight.trained_uids(step) == sorted({r["uid"] for r in straight.tables[TRAINED, step]})
        assert m["filter/trained_groups"] == len(straight.trained_uids(step)) == 4
        evicted += m["filter/generated_groups"] - m["filter/kept_groups"]
    assert evicted > 0  # the filter dropped groups, so verl refilled: what made resumed steps differ before


def test_verls_update_trains_validates_and_the_resumed_step_updates_alike(sync_runs):
    """verl's own parts of the pair (``v1_config``: GRPO with a KL loss to a reference policy, validation at the
    last step, checkpoints at 2 and 3): its actor update ran on real log-probs of a real policy, validation
    scored, and the resumed step 3 updated as the straight one did (the plain V1 pair of test_cpu_v1_learner.py
    checked this before it was folded in here: the same config, CI time)."""
    straight, resumed = sync_runs
    for step in (1, 2, 3):
        m = straight.metrics[step]
        assert np.isfinite(m["actor/pg_loss"]) and m["actor/grad_norm"] > 0
        assert "actor/kl_loss" in m and m["actor/entropy"] > 0 and m["response_length/mean"] > 0
    assert straight.metrics[1]["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # step 1: actor == reference
    assert straight.metrics[3]["actor/kl_loss"] > 0  # the actor moved away from the reference
    accuracy = {k: v for k, v in straight.metrics[3].items() if k.startswith("val-core/") and "/mean@" in k}
    assert accuracy and all(0.0 <= v <= 3.0 for v in accuracy.values()), sorted(straight.metrics[3])
    assert (straight.out / "ckpt" / "global_step_2" / "actor").is_dir() and (straight.out / "ckpt" / "global_step_3").is_dir()
    for key in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", *accuracy):
        assert resumed.metrics[3][key] == pytest.approx(straight.metrics[3][key], rel=1e-4, abs=1e-6), key


def test_a_resumed_run_generates_and_trains_what_the_straight_run_did(sync_runs):
    straight, resumed = sync_runs
    assert sorted(resumed.metrics) == [3]
    # the same groups (uids: the same prompts drawn in the same order), of the same dataset rows, scored alike
    assert resumed.generated_groups(3) == straight.generated_groups(3)
    assert resumed.trained_uids(3) == straight.trained_uids(3)
    assert resumed.trained_responses(3) == straight.trained_responses(3)  # verl's own dump of the trained batch
    trained = {uid: sorted((r["index"], r["reward"]) for r in rows) for uid, rows in
               _by_uid(straight.tables[TRAINED, 3]).items()}
    assert {uid: sorted((r["index"], r["reward"]) for r in rows) for uid, rows in
            _by_uid(resumed.tables[TRAINED, 3]).items()} == trained and sorted(trained) == straight.trained_uids(3)


def _by_uid(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["uid"], []).append(row)
    return out


def test_a_resumed_run_logs_the_straight_runs_rlhooks_metrics(sync_runs):
    straight, resumed = sync_runs
    ours = ("filter/", "source/", "sampler/", "learning/", "rewards/", "reward_monitor/", "train/num_gen_batches")
    keys = {k for k in straight.metrics[3] if k.startswith(ours)}
    assert {"filter/generated_groups", "filter/kept_groups", "train/num_gen_batches"} <= keys
    assert {k: resumed.metrics[3].get(k) for k in keys} == {k: straight.metrics[3][k] for k in keys}
    for key in ("actor/pg_loss", "actor/kl_loss", "critic/score/mean"):  # verl's update: same data, same result
        assert resumed.metrics[3][key] == pytest.approx(straight.metrics[3][key], rel=1e-4, abs=1e-6), key


def test_a_resumed_run_saves_the_straight_runs_rlhooks_state(sync_runs):
    straight, resumed = sync_runs
    state, resumed_state = straight.state(3), resumed.state(3)
    from rlhooks.core.manager import LEARNING_KEY

    assert {LEARNING_KEY, "sampler"} <= set(state["components"])  # the learning state and multi_source's
    different = differences({k: v for k, v in state.items() if k != "manifest"},
                            {k: v for k, v in resumed_state.items() if k != "manifest"})
    assert not different, different
    assert state["prompts_drawn"] == resumed_state["prompts_drawn"] > straight.state(2)["prompts_drawn"]
    # sync mode: nothing is in flight at a checkpoint, so verl saves no TransferQueue state
    assert not (straight.out / "ckpt" / "global_step_2" / "transfer_queue").exists()

"""rlhooks on verl V1's async trainers (colocate_async, separate_async): how the classes combine verl's own, which config they select,
and the staleness columns of its batches (real verl classes; the end-to-end run is in docs/how-to/async.md)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl.trainer.ppo.v1", reason="needs verl[verl-core]")

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import PPOTrainer, get_trainer_cls  # noqa: E402
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync  # noqa: E402
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync  # noqa: E402
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync  # noqa: E402

from rlhooks import Batch  # noqa: E402
from rlhooks.core.errors import ConfigError  # noqa: E402
from rlhooks.engines.verl import v1  # noqa: E402
from rlhooks.engines.verl.main import select_v1_parts  # noqa: E402
from rlhooks.engines.verl.v1.async_trainers import (  # noqa: E402
    SYNC_LIFECYCLE,
    RLHooksPPOTrainerColocateAsync,
    RLHooksPPOTrainerSeparateAsync,
    RLHooksReplayBufferAsync,
    with_staleness,
)
from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer  # noqa: E402
from rlhooks.engines.verl.v1.trainer import RLHooksPPOTrainerSync  # noqa: E402

pytestmark = pytest.mark.verl


def _defined(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if callable(value) and not name.startswith("__")}


#: what _AsyncHooks adds over the rlhooks sync trainer (staleness columns and metrics)
ASYNC_HOOKS = {"on_step_begin", "groups_scored", "_trained_batch", "_filter_metrics"}


@pytest.mark.parametrize(("trainer", "verl_async"), [(RLHooksPPOTrainerColocateAsync, PPOTrainerColocateAsync),
                                                    (RLHooksPPOTrainerSeparateAsync, PPOTrainerSeparateAsync)],
                         ids=["colocate_async", "separate_async"])
def test_the_async_trainer_has_verls_async_lifecycle_and_the_rlhooks_hooks(trainer, verl_async) -> None:
    # what verl's sync trainer adds over PPOTrainer is exactly what the async variant takes from verl's async one
    assert _defined(PPOTrainerSync) == set(SYNC_LIFECYCLE)
    for name in SYNC_LIFECYCLE:
        assert getattr(trainer, name) is getattr(verl_async, name), name
    # everything else verl's async trainer defines is verl's own (separate_async: __init__'s checks, _setup
    # with the standalone rollout, the version-aware old log-probs, the hybrid switch); on_step_begin is
    # the rlhooks one, which calls verl's through super()
    ours = (_defined(RLHooksPPOTrainerSync) | ASYNC_HOOKS) - set(SYNC_LIFECYCLE)
    for name in _defined(verl_async) - set(SYNC_LIFECYCLE) - ours:
        assert getattr(trainer, name) is getattr(verl_async, name), name
    # verl's __init__ runs (separate_async's checks first) under the rlhooks one; PPOTrainerSync has none
    assert "__init__" not in vars(PPOTrainerSync) and vars(trainer).get("__init__") in (None, RLHooksPPOTrainerSeparateAsync.__init__)
    mro = trainer.__mro__
    assert mro.index(RLHooksPPOTrainerSync) < mro.index(PPOTrainerSync) < mro.index(verl_async) < mro.index(PPOTrainer)
    for name in _defined(RLHooksPPOTrainerSync) - ASYNC_HOOKS:
        assert getattr(trainer, name) is getattr(RLHooksPPOTrainerSync, name), name
    mode = {PPOTrainerColocateAsync: "colocate_async", PPOTrainerSeparateAsync: "separate_async"}[verl_async]
    assert get_trainer_cls(mode) is verl_async and trainer.VERL_TRAINER_MODE == mode
    assert get_trainer_cls(v1.ASYNC_TRAINER_MODES[mode]) is trainer
    assert issubclass(trainer, PPOTrainer)


def test_verl_sees_each_rlhooks_trainer_as_the_mode_it_extends() -> None:
    # verl's own code branches on trainer_mode's name (trainer_base: `!= "sync"` re-issues in-flight prompts,
    # checkpoints TransferQueue); the registered rlhooks name must not switch those paths off
    modes = [(v1.TRAINER_MODE, "sync"), *((ours, mode) for mode, ours in v1.ASYNC_TRAINER_MODES.items())]
    assert [mode for _, mode in modes] == ["sync", "colocate_async", "separate_async"]
    for registered, mode in modes:
        trainer = object.__new__(get_trainer_cls(registered))
        trainer.trainer_mode = registered  # what PPOTrainer.__init__ assigns from the config
        assert (trainer.trainer_mode, trainer.registered_mode) == (mode, registered)


def test_the_async_replay_buffer_is_verls_async_one_with_the_rlhooks_filters() -> None:
    buffer = RLHooksReplayBufferAsync
    assert issubclass(buffer, RLHooksReplayBuffer) and issubclass(buffer, ReplayBufferAsync)
    assert buffer._dapo_filtered_keys is RLHooksReplayBuffer._dapo_filtered_keys
    # verl's eviction order runs as verl wrote it (issue 39 item 3): the stale groups it asks for first are kept
    # from the filters by _stale_terminal_keys, which calls verl's
    for name in ("wait_for_sampleable", "get_sampleable_count", "_terminal_eviction_reasons", "_validate_mode_config"):
        assert getattr(buffer, name) is getattr(ReplayBufferAsync, name), name
    # without an rlhooks trainer (validation partition, or not attached) eviction is verl's own
    rb = buffer("colocate_async", OmegaConf.create({}), 2, "drop", OmegaConf.create({}))
    rb.prompt_global_steps["train"].update({"old": 1, "new": 5})
    rb.finished_keys["train"].update({"old", "new"})
    stale, dropped, failed, _ = rb._terminal_eviction_reasons(5, "train")
    assert stale == {"old"} and dropped == set() and failed == set()


def _cfg(mode: str):
    return OmegaConf.create({"trainer": {"v1": {"trainer_mode": mode, "sampler": {}}}})


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_the_rlhooks_async_modes_select_the_async_replay_buffer(mode) -> None:
    ours = f"rlhooks_{mode}"
    cfg = _cfg(ours)
    set_here = select_v1_parts(cfg, [f"trainer.v1.trainer_mode={ours}"])
    assert cfg.trainer.v1.trainer_mode == ours
    assert dict(cfg.trainer.v1.sampler.custom_sampler) == {"path": v1.ASYNC_REPLAY_BUFFER_PATH,
                                                           "name": v1.ASYNC_REPLAY_BUFFER_NAME}
    assert set(set_here) == {"trainer.v1.sampler.custom_sampler"}
    # verl's own mode, chosen: it runs as the rlhooks one (as 'sync' does; issue 38, item 11)
    cfg = _cfg(mode)
    assert select_v1_parts(cfg, [f"trainer.v1.trainer_mode={mode}"])["trainer.v1.trainer_mode"] == ours
    assert cfg.trainer.v1.trainer_mode == ours
    assert cfg.trainer.v1.sampler.custom_sampler.name == v1.ASYNC_REPLAY_BUFFER_NAME
    # a mode rlhooks does not extend (here one registered by another library) is still refused, saying so
    with pytest.raises(ConfigError, match="'my_async' is not one of them, so it would train without them"):
        select_v1_parts(_cfg("my_async"), ["trainer.v1.trainer_mode=my_async"])


def test_batches_get_trained_version_and_lag_from_the_generating_version() -> None:
    batch = Batch({"uid": np.array(["a", "a", "b", "b"], dtype=object), "policy_version": np.array([3, 3, 1, 1])})
    out = with_staleness(batch, global_steps=5)  # step 5 updates the weights of version 4
    assert out["trained_version"].tolist() == [4] * 4 and out["policy_lag"].tolist() == [1, 1, 3, 3]
    assert with_staleness(Batch({"uid": np.array(["a"], dtype=object)}), 5).columns == ["uid"]  # no version: no lag


def test_rlhooks_share_of_a_step_is_measured_and_logged(tmp_path, monkeypatch) -> None:
    """verl's own V1 ``fit()`` on the rlhooks trainer (test_v1_run_hooks's harness): work inside an
    ``rlhooks_time`` block lands in verl's timing_raw as ``rlhooks``; the end-of-step hooks' time is logged
    with the next step (they run after verl's step timer); the share is over the step's wall time."""
    import json
    import time

    from .test_v1_run_hooks import v1_trainer

    from rlhooks import hookimpl

    class SlowStepEnd:
        @hookimpl
        def on_step_end(self, step, batch, metrics):
            time.sleep(0.05)

    from rlhooks.engines.verl.v1.trainer import TRACE_ENV

    seen_timing = []
    trainer = v1_trainer(tmp_path, monkeypatch, SlowStepEnd(), 2)
    trace = tmp_path / "trace.txt"
    monkeypatch.setenv(TRACE_ENV, str(trace))  # benchmarks/v1_generation.py's trace of the same intervals

    def step(metrics, timing_raw):
        from transfer_queue import KVBatchMeta

        started = time.perf_counter()
        with trainer.rlhooks_time("judge"), trainer.rlhooks_time("inner"):  # nested: counted once
            time.sleep(0.03)
        seen_timing.append((timing_raw, time.perf_counter() - started))
        return KVBatchMeta(partition_id="train", keys=[], tags=[])

    trainer.step = step
    trainer._load_checkpoint()
    started = time.time()
    trainer.fit(agent_loop_manager=None)
    # one line per outermost interval, in wall time, under the outermost's name: judge, step 1's end, ...
    lines = [line.split() for line in trace.read_text().splitlines()]
    assert [what for _, _, what in lines] == ["judge", "step_end", "judge", "step_end"]
    spans = [(float(a), float(b)) for a, b, _ in lines]
    assert all(started <= a <= b <= time.time() for a, b in spans)
    assert all(a >= prev_b for (a, _), (_, prev_b) in zip(spans[1:], spans))  # in order, not overlapping
    # in verl's timing_raw (verl names it timing_s/rlhooks), counted once: not more than the block took
    assert [0.03 <= t["rlhooks"] <= block for t, block in seen_timing] == [True, True]
    seen_timing = [t for t, _ in seen_timing]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r["metrics"] for r in records if r["kind"] == "metrics"}
    assert logged[1]["timing_s/rlhooks_step_end"] == 0.0 and logged[2]["timing_s/rlhooks_step_end"] >= 0.05
    for step, t in zip((1, 2), seen_timing):
        end = logged[step]["timing_s/rlhooks_step_end"]
        assert logged[step]["timing/rlhooks_share"] == pytest.approx((t["rlhooks"] + end) / (t["step"] + end))
    # the traced intervals are the measured ones (step 1's end is logged with step 2)
    assert [b - a for a, b in spans[::2]] == pytest.approx([t["rlhooks"] for t in seen_timing], abs=1e-3)
    assert spans[1][1] - spans[1][0] == pytest.approx(logged[2]["timing_s/rlhooks_step_end"], abs=1e-3)


def test_the_trace_of_rlhooks_intervals_is_written_only_where_its_variable_is_set(tmp_path, monkeypatch) -> None:
    import time

    from rlhooks.engines.verl.v1.trainer import TRACE_ENV, trace_interval

    trace = tmp_path / "trace.txt"
    monkeypatch.delenv(TRACE_ENV, raising=False)
    trace_interval(0.5, "judge")
    assert not trace.exists()
    monkeypatch.setenv(TRACE_ENV, str(trace))
    trace_interval(0.5, "judge")
    trace_interval(0.0, "step_end")
    (a, b, what), (c, d, what2) = (line.split() for line in trace.read_text().splitlines())
    assert (what, what2) == ("judge", "step_end") and float(b) - float(a) == pytest.approx(0.5, abs=1e-5)
    assert float(c) == float(d) and float(b) <= float(d) <= time.time()


def test_separate_async_refuses_verls_broken_hybrid_engine_false_path_before_any_worker_starts() -> None:
    import inspect

    from rlhooks.engines.verl.v1.async_trainers import check_hybrid_engine

    broken = "flush=True" in inspect.getsource(PPOTrainerSeparateAsync._setup)  # verl 0.9.1: a TypeError in _setup
    cfg = OmegaConf.create({"actor_rollout_ref": {"hybrid_engine": False}})
    if broken:
        with pytest.raises(ConfigError, match="actor_rollout_ref.hybrid_engine.*flush=True"):
            RLHooksPPOTrainerSeparateAsync(cfg)  # refused before verl's __init__ (which would start the workers)
    else:
        check_hybrid_engine(cfg)
    check_hybrid_engine(OmegaConf.create({"actor_rollout_ref": {"hybrid_engine": True}}))
    check_hybrid_engine(OmegaConf.create({"actor_rollout_ref": {}}))  # verl's default: true

"""``rlhooks train``'s driver on verl's Ray TaskRunner (issue 37, items 4-9), without Ray or a V1 run:
the run's lock taken before Ray starts and adopted by the TaskRunner, the stop request a signal turns into,
the outcome the driver records when the trainer cannot, a full disk and a dead Ray process as one line, and
the bound on a reward function's call. The real V1 run under SIGTERM/SIGINT is tests/verl/test_v1_signals.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import threading
import time
import traceback
from pathlib import Path

import pytest
import structlog

from rlhooks.core import interrupt, rundir
from rlhooks.engines.verl import driver


def _hold_lock_elsewhere(run_dir: Path, holder: dict) -> int:
    """The run directory's lock held as another process holds it: its own open of the lock file, flocked,
    with that process's record (a second open in this process is refused by flock like another process)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / rundir.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(holder).encode())
    return fd


#: the verl overrides of both `rlhooks train` tests, relative to the test's directory: one Hydra compose
#: serves both (tests/conftest.py composes each override list once)
VERL_ARGS = ("trainer.default_local_dir=ckpt", "algorithm.adv_estimator=grpo")
HOLDER = {"pid": 4242, "host": "node-7", "started": "2026-11-27T10:00:00+00:00", "command": "rlhooks train"}


# -- item 6: the lock before Ray, adopted by the TaskRunner ---------------------------------------------


def test_a_second_train_of_the_same_name_is_refused_before_ray_starts(tmp_path, monkeypatch, capsys):
    pytest.importorskip("verl.trainer.main_ppo")
    import ray
    import verl.trainer.main_ppo as main_ppo

    from rlhooks.cli import main as rlhooks_main
    from rlhooks.engines.verl import main as rl_main

    started = []
    monkeypatch.setattr(main_ppo, "run_ppo", lambda cfg, task_runner_class: started.append(cfg))  # Ray's start
    monkeypatch.setattr(rl_main, "validate_verl_config", lambda cfg, source=None: None)
    monkeypatch.chdir(tmp_path)
    fd = _hold_lock_elsewhere(tmp_path / "runs" / "r", HOLDER)
    try:
        rc = rlhooks_main(["train", "rlhooks.run.name=r", "rlhooks.run.out_dir=runs", *VERL_ARGS])
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert rc == 1 and started == [] and not ray.is_initialized()
    assert "is in use by another run (pid 4242 on node-7" in err and "Traceback" not in err


def test_the_task_runner_adopts_only_its_drivers_lock_and_records_under_it(tmp_path):
    import rlhooks.host

    run_dir = tmp_path / "r"
    fd = _hold_lock_elsewhere(run_dir, HOLDER)
    try:
        with pytest.raises(rundir.RunDirInUse, match="pid 4242"):
            rundir.adopt_lock(run_dir, {**HOLDER, "started": "2026-11-27T11:00:00+00:00"})  # another run's
        lock = rundir.adopt_lock(run_dir, HOLDER)
        cfg = rlhooks.host.load_config({"run": {"name": "r", "out_dir": str(tmp_path)}, "backends": ["jsonl"]})
        with rlhooks.host.RunManager(cfg).running():  # its own lock: the adopted one, not refused
            pass
        lock.release()
        assert json.loads((run_dir / rundir.LOCK_FILE).read_text())["pid"] == 4242  # the holder's file untouched
        with pytest.raises(rundir.RunDirInUse):  # still held by its holder
            rundir.RunDirLock(run_dir).acquire()
    finally:
        os.close(fd)
    assert '"status": "success"' in (run_dir / "metrics.jsonl").read_text()


# -- items 4, 5: a signal in the driver becomes the trainer's interrupt ------------------------------------


def _link(tmp_path: Path, token: str = "t0k") -> dict:
    return {"run_dir": str(tmp_path / "r"), "holder": {}, "stop_file": str(tmp_path / "r" / driver.STOP_FILE),
            "token": token}


def test_the_drivers_stop_request_ends_the_trainers_run_interrupted(tmp_path):
    """The TaskRunner's side (driver.in_task_runner, in this main thread as in the Ray actor): the stop file the
    driver writes raises the signal's Interrupted there, so the RunManager records the run interrupted."""
    import rlhooks.host

    cfg = rlhooks.host.load_config({"run": {"name": "r", "out_dir": str(tmp_path)}, "backends": ["jsonl"]})
    manager = rlhooks.host.RunManager(cfg)
    session = driver.DriverSession.__new__(driver.DriverSession)  # the driver's writer of the request
    session.run_dir, session.token = tmp_path / "r", "t0k"
    steps = 0
    with driver.in_task_runner(_link(tmp_path)) as outcome:
        with manager.running():
            for steps in range(1, 1000):
                manager.log_metrics(steps, {"x": 1.0})
                if steps == 3:
                    session.request_stop(signal.SIGTERM)
                time.sleep(0.02)
    assert outcome["status"] == "interrupted" and 3 <= steps < 500  # stopped within a few polls
    assert (tmp_path / "r" / driver.STOP_FILE).read_text() == f"t0k {int(signal.SIGTERM)}"
    ends = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert ends[-1] == {**ends[-1], "kind": "run_end", "status": "interrupted"}


def test_a_stop_request_of_another_driver_is_ignored(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / driver.STOP_FILE).write_text(f"old {int(signal.SIGTERM)}")  # left by a killed driver
    with driver.in_task_runner(_link(tmp_path)) as outcome:
        time.sleep(4 * driver.WATCH_INTERVAL_S)
    assert outcome["status"] is None


def _session(tmp_path: Path, grace_s: float) -> driver.DriverSession:
    session = driver.DriverSession.__new__(driver.DriverSession)
    session.run_dir = tmp_path / "r"
    session.metrics_file = session.run_dir / "metrics.jsonl"
    session.start, session.grace_s, session.token = 0, grace_s, "t0k"
    session.handle = session.ref = session.forwarded = None
    session.gave_up, session._previous = False, {}
    session.run_dir.mkdir(parents=True, exist_ok=True)
    return session


def _started_run(session: driver.DriverSession) -> None:
    session.metrics_file.write_text(json.dumps({"kind": "run_start", "time": 0, "name": "r"}) + "\n"
                                    + json.dumps({"kind": "metrics", "step": 1, "time": 0, "metrics": {}}) + "\n")


def test_the_driver_forwards_a_signal_and_records_the_end_when_the_trainer_cannot(tmp_path, capfd):
    """A real SIGTERM to this process while the driver waits (verl's ray.get) for a trainer that never ends:
    the stop request is written at once, and past the bound the run is recorded interrupted here, once."""
    session = _session(tmp_path, grace_s=0.5)
    _started_run(session)
    interrupt.outcome_recorded["status"] = None

    def wait_for_the_trainer():  # what run_ppo does once the TaskRunner exists
        session.started(None)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)

    with interrupt.signals_interrupt(), pytest.raises(interrupt.Interrupted) as raised:
        t0 = time.monotonic()
        session.run(wait_for_the_trainer)
    assert raised.value.signum == signal.SIGTERM and time.monotonic() - t0 < 5
    assert (session.run_dir / driver.STOP_FILE).read_text() == f"t0k {int(signal.SIGTERM)}"
    end = json.loads(session.metrics_file.read_text().splitlines()[-1])
    assert end["status"] == "interrupted" and "did not end within 0.5 s" in end["note"]
    assert interrupt.outcome_recorded["status"] == "interrupted"
    assert "SIGTERM: the trainer is ending the run as interrupted" in capfd.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is not session._on_signal  # handlers restored
    assert signal.getsignal(signal.SIGALRM) is not session._on_grace_expired


def test_the_driver_keeps_the_trainers_own_record(tmp_path):
    session = _session(tmp_path, grace_s=30)
    _started_run(session)

    def trainer_ends_interrupted():
        session.started(None)
        os.kill(os.getpid(), signal.SIGINT)
        with session.metrics_file.open("a") as fh:  # the TaskRunner's RunManager, once it saw the request
            fh.write(json.dumps({"kind": "run_end", "time": 1, "status": "interrupted"}) + "\n")

    with interrupt.signals_interrupt(), pytest.raises(interrupt.Interrupted) as raised:
        session.run(trainer_ends_interrupted)
    assert raised.value.signum == signal.SIGINT
    assert session.metrics_file.read_text().count("run_end") == 1
    assert driver.records_since(session.metrics_file, 0) == (True, "interrupted")


# -- items 7, 8: a full disk and a dead Ray process in one line ----------------------------------------------


def _complete_checkpoint(root: Path, step: int) -> None:
    """A checkpoint folder as checkpoints.inspect_checkpoint calls complete (verl's FSDP files, data.pt, seal)."""
    import torch

    from rlhooks.engines.verl import checkpoints

    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "fsdp_config.json").write_text(json.dumps({"world_size": 1}))
    for name in ("model", "optim", "extra_state"):
        torch.save({"w": step}, folder / "actor" / f"{name}_world_size_1_rank_0.pt")
    torch.save({}, folder / "data.pt")
    checkpoints.write_state(folder, {"components": {}}, checkpoints.manifest_of(folder))
    checkpoints.write_tracker(root, step)


def _cfg(tmp_path: Path):
    from omegaconf import OmegaConf

    return OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path / "ckpt")},
                             "actor_rollout_ref": {"actor": {}}})


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_full_disk_during_a_save_is_one_line_naming_the_folder_and_what_resumes(tmp_path):
    import torch

    _complete_checkpoint(tmp_path / "ckpt", 2)
    with pytest.raises(driver.RunFailure) as raised, driver.save_failure(_cfg(tmp_path), 3):
        torch.save({"w": torch.zeros(100_000)}, "/dev/full")  # torch's C++ writer: "unexpected pos"
    text = str(raised.value)
    assert "\n" not in text and text.startswith("no space left on device while saving the checkpoint of step 3 to "
                                                f"{tmp_path / 'ckpt' / 'global_step_3'}")
    assert "unexpected pos" in text and "last complete checkpoint is step 2" in text
    with pytest.raises(driver.RunFailure, match="no space left.*OSError.*No space left on device"), \
            driver.save_failure(_cfg(tmp_path), 3), open("/dev/full", "wb") as fh:
        fh.write(b"x" * 100_000)
        fh.flush()
    # a Ray worker's failed save (the real V1 run's, tests/verl/test_v1_full_disk.py): its own line, typed once
    from ray.exceptions import RayTaskError

    try:
        torch.save({"w": torch.zeros(100_000)}, "/dev/full")
    except RuntimeError as exc:
        remote = RayTaskError("save_checkpoint", traceback.format_exc(), exc).as_instanceof_cause()
    with pytest.raises(driver.RunFailure) as raised, driver.save_failure(_cfg(tmp_path), 3):
        raise remote
    detail = str(raised.value).split(" (", 1)[1]
    assert detail.startswith("RuntimeError: ") and "RayTaskError" not in detail, str(raised.value)
    assert any(m in detail.split(")")[0] for m in ("unexpected pos", "iostream error")), str(raised.value)
    with pytest.raises(ValueError), driver.save_failure(_cfg(tmp_path), 3):  # anything else passes through
        raise ValueError("not a disk")


def _dead_actor_in_the_task_runner():
    """What ray.get of the TaskRunner's run raises when the rollout server it called died: verl's call raised
    ActorDiedError (Ray's own, from the GCS's death context) in the TaskRunner, which Ray wraps for the driver."""
    from ray.core.generated.common_pb2 import ActorDiedErrorContext
    from ray.exceptions import ActorDiedError, RayTaskError

    context = ActorDiedErrorContext(
        class_name="CPURolloutServer", actor_id=bytes(16), pid=4242, node_ip_address="10.0.0.7",
        error_message="The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
                      "Worker exit detail: The leased worker has unrecoverable failure. Worker is requested to be "
                      "destroyed when it is returned. SIGKILL Some common causes include: (1) the process was killed "
                      "by the OOM killer due to high memory usage, (2) ray stop --force was called")
    try:
        raise ActorDiedError(context)
    except ActorDiedError as exc:  # as Ray's worker wraps it (it logs that the cause cannot be pickled)
        return RayTaskError("TaskRunner.run", traceback.format_exc(), exc).as_instanceof_cause()


def test_a_dead_ray_process_is_one_line_naming_it_and_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    pytest.importorskip("verl.trainer.main_ppo")
    import verl.trainer.main_ppo as main_ppo

    from rlhooks.cli import main as rlhooks_main
    from rlhooks.engines.verl import main as rl_main

    def task_runner(cfg, task_runner_class):
        raise _dead_actor_in_the_task_runner()

    _complete_checkpoint(tmp_path / "ckpt", 2)
    monkeypatch.setattr(main_ppo, "run_ppo", task_runner)
    monkeypatch.setattr(rl_main, "validate_verl_config", lambda cfg, source=None: None)
    monkeypatch.chdir(tmp_path)
    rc = rlhooks_main(["train", "rlhooks.run.name=r", "rlhooks.run.out_dir=runs", *VERL_ARGS])
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("error:"))
    assert rc == 1 and err.count("Traceback") == err.count("isn't serializable")  # Ray's own log of the wrapping
    assert "a Ray process of the run died: CPURolloutServer (pid 4242, on 10.0.0.7)" in line
    assert "SIGKILL" in line and "the last complete checkpoint is step 2" in line and "common causes" not in line
    assert not (tmp_path / "runs" / "r" / rundir.LOCK_FILE).exists()  # released: a rerun may start


# -- item 9: a reward function's call is bounded ----------------------------------------------------------


def _sleepy(seconds: float):
    def sleepy(response, target, **_):
        if "hang" in response:
            time.sleep(seconds)
        return 1.0

    return sleepy


def test_a_reward_function_that_hangs_is_named_and_its_rows_count_as_its_errors():
    from rlhooks.core.rewards import RewardEntry, RewardPipeline

    pipe = RewardPipeline([RewardEntry("judge", _sleepy(30), error_score=-1.0)], timeout_s=0.3)
    with structlog.testing.capture_logs() as logs:
        t0 = time.monotonic()
        result = pipe.score(["ok", "hang", "ok"], ["1", "1", "1"])
    assert time.monotonic() - t0 < 3
    assert result.components["judge"].tolist() == [1.0, -1.0, 1.0] and result.metrics()["rewards/errors/judge"] == 1
    assert any("reward function 'judge' did not return within run.reward_timeout_s=0.3 s" in e["event"] for e in logs)


def test_a_batch_scorer_that_hangs_scores_its_rows_as_errors():
    from rlhooks.core.rewards import RewardEntry, RewardPipeline

    class Judge:
        def __call__(self, response, target):
            return 1.0

        def score_batch(self, responses, targets):
            time.sleep(30)

    pipe = RewardPipeline([RewardEntry("judge", Judge())], timeout_s=0.3)
    t0 = time.monotonic()
    result = pipe.score(["a", "b"], ["1", "1"])
    assert time.monotonic() - t0 < 3 and result.errors == {"judge": 2}


def test_verls_reward_loop_thread_gets_the_bound_too(monkeypatch):
    """V1 scores in verl's reward-loop workers, in a thread pool (run_in_executor): compute_score's bound."""
    from rlhooks.engines.verl import reward_function as verl_adapter

    monkeypatch.setitem(verl_adapter.BUILTIN_FUNCTIONS, "sleepy_test_fn", _sleepy(30))
    out: dict = {}

    def score():
        out.update(verl_adapter.compute_score("math", "hang", "1", functions=["sleepy_test_fn"],
                                              error_score={"sleepy_test_fn": -2.0}, timeout_s=0.3))

    t0 = time.monotonic()
    worker = threading.Thread(target=score)
    worker.start()
    worker.join(10)
    assert time.monotonic() - t0 < 3
    assert out["sleepy_test_fn"] == -2.0 and out["reward_errors/sleepy_test_fn"] == 1.0


def _reward_call_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rlhooks-reward-call"]


def _in_a_thread(fn):
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            out["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(20)
    assert not worker.is_alive()
    if "error" in out:
        raise out["error"]
    return out


def test_a_threads_bounded_calls_share_one_helper_thread_and_it_ends_with_the_thread():
    from rlhooks.core import rewards

    before = set(_reward_call_threads())

    def calls():
        values = [rewards.call_bounded(lambda i=i: i * 2, 5.0) for i in range(50)]
        helpers = set(_reward_call_threads()) - before
        with pytest.raises(ZeroDivisionError):  # a call's error is the caller's
            rewards.call_bounded(lambda: 1 / 0, 5.0)
        return values, helpers, rewards.call_bounded(lambda: "after an error", 5.0)

    out = _in_a_thread(calls)
    values, helpers, after = out["value"]
    assert values == [i * 2 for i in range(50)] and len(helpers) == 1 and after == "after an error"
    (helper,) = helpers
    helper.join(5)  # its calling thread has ended: so does it
    assert not helper.is_alive()


def test_the_helper_of_a_thread_python_did_not_start_ends_with_it_too():
    """A thread of a C pool (Ray's, say) is a ``_DummyThread`` to ``threading``, alive to it forever: the helper
    goes with the thread's locals, not with ``is_alive``."""
    import _thread

    from rlhooks.core import rewards

    before = set(_reward_call_threads())
    out, finished = {}, threading.Event()

    def foreign():
        try:
            out["value"] = rewards.call_bounded(lambda: "scored", 5.0)
            out["helpers"] = set(_reward_call_threads()) - before
        finally:
            finished.set()

    _thread.start_new_thread(foreign, ())
    assert finished.wait(10) and out["value"] == "scored" and len(out["helpers"]) == 1
    (helper,) = out["helpers"]
    helper.join(5)
    assert not helper.is_alive()


def test_a_wait_cut_short_by_another_bound_leaves_its_helper_too():
    """In the main thread under an outer timer (a caller's own ``interrupt.bounded``), the outer bound can end the
    wait first: the next call must not queue behind the abandoned one."""
    from rlhooks.core import interrupt, rewards

    release = threading.Event()
    try:
        with pytest.raises(interrupt.TimeBoundExceeded):
            with interrupt.bounded(0.3):  # an itimer runs: call_bounded uses a helper in the main thread too
                rewards.call_bounded(lambda: release.wait(20), 10.0)
        t0 = time.monotonic()
        with interrupt.bounded(30):
            assert rewards.call_bounded(lambda: "fast", 5.0) == "fast"
        assert time.monotonic() - t0 < 2
    finally:
        release.set()


def test_a_call_past_its_bound_leaves_its_helper_and_the_next_call_gets_a_new_one():
    from rlhooks.core import rewards

    release = threading.Event()
    before = set(_reward_call_threads())

    def calls():
        with pytest.raises(rewards.RewardTimeout, match="did not return within 0.2 s"):
            rewards.call_bounded(lambda: release.wait(20), 0.2)
        hung = set(_reward_call_threads()) - before
        value = rewards.call_bounded(lambda: "next", 5.0)  # not queued behind the hung call
        return hung, set(_reward_call_threads()) - before, value

    t0 = time.monotonic()
    hung, helpers, value = _in_a_thread(calls)["value"]
    assert value == "next" and time.monotonic() - t0 < 3
    assert len(hung) == 1 and len(helpers) == 2 and hung < helpers
    (left,) = hung
    release.set()  # the late call returns: its helper, told to end, ends
    left.join(5)
    assert not left.is_alive()


def test_ctrl_c_while_a_reward_hangs_is_an_interrupt_not_a_reward_error():
    from rlhooks.core.rewards import RewardEntry, RewardPipeline

    pipe = RewardPipeline([RewardEntry("judge", _sleepy(30))], timeout_s=20)
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
    with interrupt.signals_interrupt(), pytest.raises(interrupt.Interrupted):
        pipe.score(["hang"], ["1"])
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0  # the bound's timer is off


def test_the_reward_bound_is_a_run_option_the_adapter_gets():
    import rlhooks.host
    from rlhooks.core.errors import ConfigError

    assert rlhooks.host.load_config({}).run.reward_timeout_s == 300.0
    with pytest.raises(ConfigError, match=r"run\.reward_timeout_s: must be a finite number of seconds"):
        rlhooks.host.load_config({"run": {"reward_timeout_s": -1}})
    cfg = rlhooks.host.load_config({"run": {"reward_timeout_s": 30}, "rewards": ["check_answer"]})
    assert rlhooks.host.RunManager(cfg).rewards.timeout_s == 30.0

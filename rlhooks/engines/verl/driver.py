"""``rlhooks train`` around verl's Ray TaskRunner: the run's lock, signals and failures, held by the driver.

verl trains in a Ray actor, the TaskRunner (``run_ppo``: ``ray.get(runner.run.remote(config))``); the run's
outcome (the RunManager's ``run_end``) is recorded there. The driver (the ``rlhooks train`` process) is what
a user's Ctrl-C and a scheduler's SIGTERM reach, and Ray kills the TaskRunner as soon as the driver exits
(``ray.init`` also replaces the driver's SIGTERM handler with one that kills Ray's processes). So:

* **The lock** (:func:`locked`): the driver takes the run directory's lock before Ray starts and before
  anything reads the run's checkpoint; the TaskRunner adopts it (``rundir.adopt_lock``), so a second run of
  the same name is refused at once, and verl's ``init`` (which loads the checkpoint and runs
  ``on_load_checkpoint``) runs under it.
* **Signals** (:class:`DriverSession`): once the TaskRunner exists, SIGINT/SIGTERM in the driver forward a
  stop request to it (a file in the run directory, :data:`STOP_FILE`, which :func:`in_task_runner` watches
  and turns into the same signal in the TaskRunner's main thread: ``Interrupted``, the run recorded
  ``interrupted`` as in the simulator; a checkpoint save under way is finished first). The driver waits
  up to :data:`STOP_GRACE_S` for the TaskRunner to end, then stops it and records the outcome itself. The
  command exits 128 + the signal's number with one line. A second signal stops at once.
* **Failures** (:func:`explain_failure`): a full disk and a dead Ray process are one line naming the folder or
  the process and what is resumable, not Ray's remote traceback.
"""

from __future__ import annotations

import _thread
import contextlib
import errno
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

from rlhooks.core import interrupt, rundir
from rlhooks.core.errors import RLHooksError
from rlhooks.core.records import METRICS_FILE, encode_record, records_past
from rlhooks.engines.verl.output import terminal_stderr

log = structlog.get_logger("rlhooks.verl")

#: the stop request the driver writes into the run directory for the TaskRunner ("<token> <signal number>")
STOP_FILE = ".rlhooks.stop"
#: how long the driver waits after a signal for the TaskRunner to record the run and end; below the 30 s
#: SLURM (KillWait) and Kubernetes (terminationGracePeriodSeconds) give by default before their SIGKILL
STOP_GRACE_S = 25.0
#: how often the TaskRunner looks for a stop request
WATCH_INTERVAL_S = 0.2


class RunFailure(RLHooksError):
    """The run failed for a reason outside rlhooks (a full disk, a dead Ray process): what, where, what is left."""


# -- the lock -------------------------------------------------------------------------------------


def run_dir_of(cfg: Any) -> Path:
    from rlhooks.engines.verl.config import rlhooks_config

    run = rlhooks_config(cfg).run
    return Path(run.out_dir) / run.name


@contextlib.contextmanager
def locked(cfg: Any) -> Iterator[rundir.RunDirLock]:
    """The run directory's lock for the whole command (before Ray starts). A run that fails before it wrote
    anything leaves no lock file or new directory behind, as ``rundir.locked``."""
    run_dir = run_dir_of(cfg)
    with rundir.locked(run_dir, "rlhooks train") as lock:
        stop = run_dir / STOP_FILE
        with contextlib.suppress(FileNotFoundError):
            stop.unlink()  # a request left by a driver that was killed: not this run's
        try:
            yield lock
        finally:
            with contextlib.suppress(OSError):
                stop.unlink()


# -- signals: the driver's side ----------------------------------------------------------------------


class DriverSession:
    """The driver's part of a run on verl's Ray TaskRunner: ``runner_class`` wraps the TaskRunner class given
    to verl's ``run_ppo`` (which creates the actor once Ray runs: the driver's signal handling starts then);
    ``run(call)`` runs ``call`` (verl's ``run_ppo``) and turns a forwarded signal into ``Interrupted``."""

    def __init__(self, cfg: Any, *, grace_s: float = STOP_GRACE_S, metrics_start: int | None = None,
                 remote: bool = False):
        self.run_dir = run_dir_of(cfg)
        #: the run directory is on the TaskRunner's node, not here (a relative one on a joined Ray cluster): the
        #: TaskRunner takes its own lock there (no link), and a signal ends the run after the grace bound
        self.remote = remote
        self.metrics_file = self.run_dir / METRICS_FILE
        self.start = (self.metrics_file.stat().st_size if self.metrics_file.is_file() else 0) \
            if metrics_start is None else metrics_start
        self.grace_s = grace_s
        self.token = secrets.token_hex(8)
        self.handle: Any = None  # the TaskRunner actor
        self.ref: Any = None  # its run() result
        self.forwarded: int | None = None  # the signal forwarded to it
        self.gave_up = False
        self._previous: dict[int, Any] = {}

    def link(self) -> dict[str, Any] | None:
        """What the TaskRunner needs (``in_task_runner``): the lock to adopt and where a stop request comes."""
        if self.remote:
            return None
        return {"run_dir": os.path.abspath(self.run_dir), "holder": rundir.lock_holder(self.run_dir),
                "stop_file": os.path.abspath(self.run_dir / STOP_FILE), "token": self.token}

    def runner_class(self, cls: Any) -> Any:
        return _RunnerClass(cls, self)

    # called by _RunnerClass.remote, in the main thread, once Ray runs and the actor is created
    def started(self, handle: Any) -> None:
        self.handle = handle
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in interrupt.HANDLED:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.forwarded is None:
            self.forwarded = signum
            self.request_stop(signum)
            os.write(terminal_stderr(), f"rlhooks: {name}: the trainer is ending the run as interrupted (waiting up to "
                        f"{self.grace_s:g} s; a second signal stops at once)\n".encode())
            self._previous.setdefault(signal.SIGALRM, signal.signal(signal.SIGALRM, self._on_grace_expired))
            signal.setitimer(signal.ITIMER_REAL, self.grace_s)
            return
        os.write(terminal_stderr(), f"\nrlhooks: second {name}: exiting now; the trainer's Ray processes are stopped with this "
                    f"process and the run's end may not be recorded\n".encode())
        os._exit(128 + signum)

    def _on_grace_expired(self, _signum: int, _frame: Any) -> None:
        self.gave_up = True
        raise interrupt.Interrupted(self.forwarded or signal.SIGTERM)

    def request_stop(self, signum: int) -> None:
        """Ask the TaskRunner to end the run as ``signum`` would (the stop file it watches)."""
        try:
            path = self.run_dir / STOP_FILE
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{self.token} {int(signum)}")
        except OSError as exc:  # then only the grace bound ends it
            os.write(terminal_stderr(), f"rlhooks: cannot ask the trainer to stop ({exc.strerror or exc}: {self.run_dir / STOP_FILE})\n"
                     .encode())

    def _restore(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, old in self._previous.items():
            signal.signal(sig, old)
        self._previous.clear()

    def run(self, call: Callable[[], Any]) -> Any:
        """``call()`` (verl's run_ppo with ``runner_class``); after a forwarded signal, ``Interrupted`` with the
        outcome the trainer recorded, or the one this process records when the trainer could not."""
        try:
            out = call()
        except BaseException as exc:
            self._restore()
            if self.forwarded is None:
                raise
            if self.gave_up or isinstance(exc, KeyboardInterrupt):
                self.stop_trainer()
            self.record_interrupted(f"the trainer did not end within {self.grace_s:g} s" if self.gave_up else
                                    f"the trainer ended with {type(exc).__name__}")
            raise interrupt.Interrupted(self.forwarded) from None
        self._restore()
        if self.forwarded is not None:
            status = self.trainer_status()  # what the TaskRunner recorded (also without a jsonl backend)
            if status is None:
                self.record_interrupted("the trainer ended without recording the run's end")
            else:
                interrupt.note_outcome(status)
            raise interrupt.Interrupted(self.forwarded)
        return out

    def trainer_status(self) -> str | None:
        """The outcome the TaskRunner's run returned (``in_task_runner``); None when unknown."""
        if self.ref is None:
            return None
        import ray

        try:
            status = ray.get(self.ref, timeout=10)
        except Exception:  # noqa: BLE001 - it failed or is gone: the records decide
            return None
        return status if isinstance(status, str) else None

    def stop_trainer(self) -> None:
        """Kill the TaskRunner (its run cannot record anything after this process did)."""
        if self.handle is None:
            return
        import ray

        with contextlib.suppress(Exception):
            ray.kill(self.handle, no_restart=True)
        if self.ref is not None:  # wait for it to be gone, briefly: it must not append after our record
            with contextlib.suppress(Exception):
                ray.wait([self.ref], timeout=10)

    def record_interrupted(self, why: str) -> str | None:
        """The run's outcome as recorded: the trainer's ``run_end`` when it wrote one, else ``interrupted``
        appended here (only for a run that started, i.e. wrote its ``run_start``); None: no run was recorded."""
        started, status = records_since(self.metrics_file, self.start)
        if status is None and started:
            status = "interrupted"
            try:
                fd = os.open(self.metrics_file, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    os.write(fd, encode_record({"kind": "run_end", "time": time.time(), "status": status,
                                                "note": f"recorded by rlhooks train: {why}"}))
                finally:
                    os.close(fd)
            except OSError as exc:
                os.write(2, f"rlhooks: cannot record the run's end in {self.metrics_file}: {exc.strerror or exc}\n"
                         .encode())
                return None
        if status is not None:
            interrupt.note_outcome(status)
        return status


def records_since(metrics_file: Path, start: int) -> tuple[bool, str | None]:
    """(a ``run_start`` was written past byte ``start``, the status of the last ``run_end`` after it)."""
    started, status = False, None
    for record in records_past(metrics_file, start):
        if record.get("kind") == "run_start":
            started, status = True, None
        elif record.get("kind") == "run_end":
            status = record.get("status")
    return started, status


class _RunnerClass:
    """verl's TaskRunner class as ``run_ppo`` uses it (``.remote()``, ``.options(...).remote()``)."""

    def __init__(self, cls: Any, session: DriverSession):
        self._cls, self._session = cls, session

    def options(self, *args: Any, **kwargs: Any) -> _RunnerClass:
        return _RunnerClass(self._cls.options(*args, **kwargs), self._session)

    def remote(self, *args: Any, **kwargs: Any) -> _RunnerHandle:
        handle = self._cls.remote(*args, **kwargs)
        self._session.started(handle)
        return _RunnerHandle(handle, self._session)


class _RunnerHandle:
    """The TaskRunner actor; ``run.remote(config)`` also hands it the session's ``link()``."""

    def __init__(self, handle: Any, session: DriverSession):
        self._handle, self._session = handle, session

    @property
    def run(self) -> Any:
        session, handle = self._session, self._handle

        class _Run:
            @staticmethod
            def remote(config: Any) -> Any:
                session.ref = handle.run.remote(config, session.link())
                return session.ref

        return _Run()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


# -- signals: the TaskRunner's side ------------------------------------------------------------------


@contextlib.contextmanager
def in_task_runner(link: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """The TaskRunner's run under ``rlhooks train``'s driver: its lock adopted, SIGINT/SIGTERM (and the
    driver's stop request) raising ``Interrupted`` in this main thread, so the RunManager records the run
    ``interrupted``. Yields a dict whose ``status`` is the outcome recorded here once the block ended
    (None: no run was recorded); an interrupt ends the block quietly (the driver reports it)."""
    out: dict[str, Any] = {"status": None}
    if not link:
        yield out
        return
    interrupt.outcome_recorded["status"] = None
    lock = rundir.adopt_lock(link["run_dir"], link["holder"], "rlhooks train (Ray TaskRunner)")
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(link, done), name="rlhooks-stop-request", daemon=True)
    try:
        with interrupt.signals_interrupt():
            watcher.start()
            try:
                yield out
            except KeyboardInterrupt as exc:
                log.warning(f"the run was interrupted ({getattr(exc, 'signal_name', 'SIGINT')})")
            finally:
                done.set()
    finally:
        lock.release()
        out["status"] = interrupt.outcome_recorded["status"]


def _watch(link: dict[str, Any], done: threading.Event) -> None:
    path = link["stop_file"]
    while not done.wait(WATCH_INTERVAL_S):
        try:
            with open(path, encoding="utf-8") as fh:
                token, _, signum = fh.read(100).partition(" ")
        except OSError:
            continue
        if token == link["token"] and signum.strip().isdigit():
            if not done.is_set():
                _thread.interrupt_main(int(signum))  # the signal's handler, in the main thread (signals_interrupt)
            return


# -- failures that say what happened ----------------------------------------------------------------

#: what torch and the C++ runtime say when a write hits a full disk (torch.save: PytorchStreamWriter)
_DISK_FULL = ("no space left on device", "disk quota exceeded", "unexpected pos", "iostream error",
              "pytorchstreamwriter failed writing")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it, a Ray worker's error included) is a write to a full disk."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(e).lower()
        if any(marker in text for marker in _DISK_FULL):
            return True
    return False


def dead_actor(exc: BaseException) -> str | None:
    """The message of the Ray ``ActorDiedError`` (an actor process died) in ``exc``'s chain, if any. Ray cannot
    pickle that error (its death context) when the TaskRunner raises it: the driver then gets a ``RayError``
    holding its traceback as text, which names it."""
    try:
        from ray.exceptions import RayActorError
    except ImportError:
        return None
    for e in _chain(exc):
        if isinstance(e, RayActorError):
            return str(e)
    for e in _chain(exc):
        text = str(e)
        if "ActorDiedError" in text and "class_name:" in text:
            return text[text.rindex("ActorDiedError"):]
    return None


def _actor_text(text: str) -> str:
    """``CPURolloutServer (pid 123, on 10.0.0.1)`` from a Ray actor error's message."""
    fields = {k: v.strip() for k, v in re.findall(r"^\s*(class_name|pid|ip|name):\s*(\S.*)$", text, re.M)}
    what = fields.get("class_name") or fields.get("name") or "a Ray actor"
    where = ", ".join(x for x in (f"pid {fields['pid']}" if "pid" in fields else "",
                                  f"on {fields['ip']}" if "ip" in fields else "") if x)
    return f"{what} ({where})" if where else what


def resumable(cfg: Any) -> str:
    """What a rerun resumes from: the tracked checkpoint and whether it is complete."""
    from rlhooks.engines.verl import checkpoints

    try:
        from verl.trainer.ppo.utils import need_critic

        critic = bool(need_critic(cfg))
    except Exception:  # noqa: BLE001 - an estimate for a message: the actor's files decide then
        critic = False
    root = Path(os.path.abspath(str(cfg.trainer.default_local_dir)))
    roles = checkpoints.roles_of(cfg, critic)
    tracked, problem = checkpoints.read_tracker(root)
    if tracked is not None:
        found = checkpoints.inspect_checkpoint(root / f"{checkpoints.STEP_PREFIX}{tracked}", roles)
        if found.complete:
            return (f"the last complete checkpoint is step {tracked} ({found.folder}), which the tracker names: "
                    f"rerun the same command to resume from it")
        return f"the tracker names step {tracked}, which is not complete ({'; '.join(found.problems)})"
    newest = checkpoints.newest_complete(root, roles)
    if newest is not None:
        return f"{problem or 'there is no tracker'}; the newest complete checkpoint is step {newest.step} ({newest.folder})"
    return f"there is no complete checkpoint in {root} yet: a rerun starts from step 1"


@contextlib.contextmanager
def save_failure(cfg: Any, step: int) -> Iterator[None]:
    """Around a trainer's checkpoint save: a full disk (here or in a Ray worker writing its shards) is one
    ``RunFailure`` naming the step's folder and what is resumable, instead of torch's C++ message."""
    try:
        yield
    except Exception as exc:
        if not disk_full(exc):
            raise
        from rlhooks.engines.verl.checkpoints import STEP_PREFIX

        folder = Path(os.path.abspath(str(cfg.trainer.default_local_dir))) / f"{STEP_PREFIX}{step}"
        raise RunFailure(f"no space left on device while saving the checkpoint of step {step} to {folder} "
                         f"({_short(exc)}); {resumable(cfg)}. Free space there (or set trainer.default_local_dir "
                         f"elsewhere) before you rerun") from None


def _short(exc: BaseException) -> str:
    """The first line of the innermost message that says what failed (torch's C++ enforce, an OSError)."""
    for e in _chain(exc):
        text = str(e)
        if isinstance(e, OSError) or any(m in text.lower() for m in _DISK_FULL):
            line = next((ln for ln in text.splitlines() if any(m in ln.lower() for m in _DISK_FULL)),
                        text.splitlines()[0] if text else type(e).__name__)
            line = " ".join(line.split())[:200]
            # a Ray worker's error quotes the worker's own "RuntimeError: ..." line: not typed twice
            return line if re.match(r"[A-Za-z_.]*(Error|Exception)(\(\w+\))?: ", line) else f"{type(e).__name__}: {line}"
    return type(exc).__name__


def explain_failure(exc: BaseException, cfg: Any) -> RunFailure | None:
    """One line for a failure outside rlhooks that ended the run (None: not one of these)."""
    if disk_full(exc):
        where = next((e.filename for e in _chain(exc) if isinstance(e, OSError) and e.filename), None)
        where = where or str(cfg.trainer.default_local_dir)
        return RunFailure(f"no space left on device while writing {where} (the run ended 'failed'); "
                          f"{resumable(cfg)}. Free space there (or set trainer.default_local_dir / "
                          f"rlhooks.run.out_dir elsewhere) first")
    dead = dead_actor(exc)
    if dead is not None:
        detail = next((line.strip() for line in dead.splitlines()
                       if "exit detail" in line.lower() or "worker process has died" in line.lower()), "")
        detail = " ".join(detail.split()).split(" Some common causes")[0][:300]  # Ray's advice follows
        return RunFailure(f"a Ray process of the run died: {_actor_text(dead)}" + (f": {detail}" if detail else "")
                          + f" (the run ended 'failed'); {resumable(cfg)}")
    return None


__all__ = ["DriverSession", "RunFailure", "STOP_FILE", "STOP_GRACE_S", "disk_full", "dead_actor",
           "explain_failure", "in_task_runner", "locked", "records_since", "resumable"]

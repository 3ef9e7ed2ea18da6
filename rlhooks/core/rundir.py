"""Run directories: safe names, one writer at a time, replacing only finished runs, atomic files.

Every engine writes a run into ``<run.out_dir>/<run.name>/``. This module is the one place that
decides what may happen to such a directory:

* ``check_run_name``: a run name is one plain path component (not empty, ``.``, ``..``,
  absolute, or containing a path separator), so a run directory is never its parent or a
  sibling's; the config refuses any other name at load time (key ``run.name``).
* ``RunDirLock``: while a run writes its directory it holds an exclusive ``flock`` on
  ``<run_dir>/.rlhooks.lock``, a file holding its pid, host and start time. A second run on the
  same directory refuses to start and names that process. The kernel drops the lock when its
  process dies, so a lock left by a dead process is taken over (with a warning naming it).
  The lock file is opened without following a link and is never truncated unless it is an rlhooks
  lock file: a link, a hard link, a FIFO or someone's file by that name is refused, left as it was.
  Only a command that created the lock file and then refused the directory (or failed before
  writing anything) removes it again, while still holding it; a locker checks after ``flock``
  that the path still names the file it locked, so two processes never lock two different files
  of the same name. Re-entrant within a process: an engine's CLI and its RunManager may both hold it.
* ``RunDirectory``: a directory a command *replaces* on a rerun (``rlhooks simulate``). It is
  marked with ``.rlhooks-simulate`` (JSON: who made it, pid, host, start, and once the run
  ended its status and the entries it wrote). A rerun replaces only a directory with that
  marker whose run *finished*, and deletes only the entries the marker lists; anything else
  in it (a file a user added, a run that was killed and never finished) makes it refuse,
  having deleted nothing.
  A shared root (``--compare``'s, ``create(rewrites=...)``) is rewritten in place instead: the
  entries it rewrites must be absent or the earlier run's, and not links; its other entries stay.
* ``open_atomic`` / ``write_atomic``: a file a run owns under a fixed name (summary.json, the
  report's page, data.parquet, ...) is written to a temporary file in the same directory, flushed
  to disk and renamed over the target: readers see the old file or the whole new one, never a
  0-byte or partial file, also when the disk is full; a link at the target is replaced, never
  written through, and a link between the run directory and the target is refused.
* ``claim_output`` / ``open_output`` (the plugin API): a plugin's file in the run directory, claimed
  first, never through a link inside any run directory (found by its lock file, so in any process);
  what the run's own process creates there unclaimed is the run's too (``RunDirectory.adopt_unclaimed``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import os
import socket
import stat
import sys
import tempfile
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

import structlog

from rlhooks.core import interrupt
from rlhooks.core.errors import RLHooksError

log = structlog.get_logger("rlhooks.rundir")

LOCK_FILE = ".rlhooks.lock"
#: marks a directory made by a command that replaces it on a rerun (the name older versions used)
MARKER_FILE = ".rlhooks-simulate"
#: what an older version's `rlhooks simulate` run (a plain-text marker, no list) wrote with default paths
LEGACY_ENTRIES = frozenset({"config.yaml", "data.parquet", "metrics.jsonl", "report", "reward_monitor.json",
                            "summary.json", "tensorboard", "wandb"})
#: files rlhooks keeps in a run directory for itself (not run output)
BOOKKEEPING = frozenset({LOCK_FILE, MARKER_FILE})
#: entries a run directory owns from its start: `rlhooks report <run_dir>` draws the run's report there
#: at any time, also while the run still runs
DERIVED_ENTRIES = frozenset({"report"})


class RunDirError(RLHooksError):
    """A run directory cannot be used: in use by another run, or not safe to replace."""


class RunDirInUse(RunDirError):
    """Another process holds the run directory's lock."""


def check_run_name(name: Any) -> str | None:
    """Why ``name`` cannot name a run directory, or None when it can."""
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not name.strip():
        return "must not be empty (the run would be written straight into run.out_dir)"
    if name in (".", ".."):
        return f"must not be {name!r} (the run directory would be run.out_dir or its parent)"
    seps = {"/", "\\", os.sep, *(filter(None, [os.altsep]))}
    if any(s in name for s in seps) or os.path.isabs(name):
        return f"must be one directory name without path separators, got {name!r} (put the parent in run.out_dir)"
    if "\x00" in name:
        return "must not contain a NUL character"
    problem = check_path_text(name)
    if problem:
        return problem
    if len(name.encode("utf-8", "surrogatepass")) > 255:
        return "is longer than 255 bytes, the limit of a directory name"
    return None


def safe_run_name(text: str) -> str:
    """``text`` made into a valid run name (separators and NULs become '-'), for names derived
    from another tool's setting (e.g. verl's trainer.experiment_name)."""
    out = "".join("-" if c in "/\\\x00" else c for c in str(text)).strip()
    if out in ("", ".", ".."):
        out = "run"
    return out[:200]


# -- locking ---------------------------------------------------------------------------------

_held: dict[str, list[Any]] = {}  # realpath -> [file object, count]
_held_lock = threading.Lock()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _holder_text(info: dict[str, Any]) -> str:
    parts = [f"pid {info.get('pid', '?')}"]
    if info.get("host"):
        parts.append(f"on {info['host']}")
    if info.get("started"):
        parts.append(f"started {info['started']}")
    if info.get("command"):
        parts.append(f"({info['command']})")
    return " ".join(parts)


def _read_holder(fh: Any) -> dict[str, Any]:
    try:
        fh.seek(0)
        text = fh.read(4096)
        info = json.loads(text) if text.strip() else {}
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


class RunDirLock:
    """An exclusive lock on a run directory for as long as a run writes it (see the module doc)."""

    def __init__(self, run_dir: str | Path, command: str = "rlhooks") -> None:
        self.run_dir = Path(run_dir)
        self.command = command
        self._key: str | None = None

    def acquire(self) -> RunDirLock:
        if self.run_dir.is_symlink():  # every engine (train resumes into its directory, so checks it here)
            raise RunDirError(f"run directory {self.run_dir} is {_kind(self.run_dir)}; rlhooks never writes a run "
                              f"through a link: remove the link, or set --out / run.out_dir to the directory you mean")
        created_dirs = _make_dirs(self.run_dir)
        key = os.path.realpath(self.run_dir)
        with _held_lock:
            held = _held.get(key)
            if held is not None:  # this process already holds it (an engine CLI and its RunManager)
                held[1] += 1
                self._key = key
                return self
            try:
                fh, created_file, stale = self._lock_file()
            except BaseException:
                _remove_empty(created_dirs)
                raise
            if stale:
                log.warning(
                    f"run directory {self.run_dir} had a stale lock of {_holder_text(stale)}: that run did not end "
                    f"cleanly (killed?); taking the lock over",
                    run_dir=str(self.run_dir),
                )
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": _now(),
                                 "command": self.command}))
            fh.flush()
            _held[key] = [fh, 1, created_file, created_dirs]
            self._key = key
        return self

    def _lock_file(self) -> tuple[Any, bool, dict[str, Any]]:
        """(the locked lock file, whether this call created it, its earlier holder's record).

        Opened without following a link and never truncated unless it is an rlhooks lock file: a
        planted ``.rlhooks.lock`` (a symlink, a hard link, a FIFO, someone's file) is refused, never emptied.
        """
        path = self.run_dir / LOCK_FILE
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        what = (f"remove it if it is not yours and no rlhooks command is running there, or choose another "
                f"run.name / --out")
        for _ in range(100):  # another run may remove a lock file it created (a refusal) between open and lock
            created = False
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                created = True
            except FileExistsError:
                try:
                    fd = os.open(path, flags)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EOPNOTSUPP):
                        raise RunDirError(f"{path} is not a regular file ({_kind(path)}), so rlhooks does not use it "
                                          f"as its lock file (it never writes through a link); {what}") from None
                    raise RunDirError(f"cannot open the lock file {path}: {exc.strerror or exc}") from None
            except OSError as exc:
                raise RunDirError(f"cannot create the lock file {path}: {exc.strerror or exc}") from None
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a FIFO, a device, a hard link to a user's file
                os.close(fd)
                kind = _kind(path) if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} hard links"
                raise RunDirError(f"{path} is not a lock file rlhooks made ({kind}), so rlhooks leaves it as it is; {what}")
            fh = os.fdopen(fd, "r+", encoding="utf-8")  # "r+": never truncates on open
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                info = _read_holder(fh)
                fh.close()
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RunDirError(f"cannot lock run directory {self.run_dir}: {exc.strerror or exc}") from None
                raise RunDirInUse(
                    f"run directory {self.run_dir} is in use by another run ({_holder_text(info) or 'unknown process'}); "
                    f"wait for it to finish, stop it, or choose another run.name / --out"
                ) from None
            if not _names(path, fh):  # the file locked must still be the one at the path (its creator may have removed it)
                fh.close()
                continue
            text = ""
            try:
                fh.seek(0)
                text = fh.read(_LOCK_MAX + 1)
                info = json.loads(text) if text.strip() else {}
            except (OSError, ValueError):  # not text, not JSON
                info = None
            if not isinstance(info, dict) or set(info) - _LOCK_KEYS or len(text) > _LOCK_MAX:
                fh.close()
                raise RunDirError(f"{path} is not a lock file rlhooks made (it holds other data), so rlhooks does not "
                                  f"overwrite it; {what}")
            return fh, created, info
        raise RunDirError(f"cannot lock run directory {self.run_dir}: its lock file keeps being replaced")

    def release(self, *, discard: bool = False) -> None:
        """Unlock. ``discard``: the command refused the directory or failed before it wrote anything
        there: the lock file (and the directories) this lock created are removed again, if empty."""
        if self._key is None:
            return
        with _held_lock:
            key, self._key = self._key, None
            held = _held.get(key)
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del _held[key]
            fh, _, created_file, created_dirs = held
            if fh is None:  # adopted (adopt_lock): the flock is its holder's to release
                return
            try:
                if discard and created_file and _names(self.run_dir / LOCK_FILE, fh):
                    os.unlink(self.run_dir / LOCK_FILE)  # while still locked (see _lock_file's inode check)
                else:
                    fh.seek(0)
                    fh.truncate()  # an empty lock file: the last run ended cleanly
                    fh.flush()
            except OSError:
                pass  # e.g. disk gone; the kernel lock still goes away with the file
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
                fh.close()
            if discard:
                _remove_empty(created_dirs)

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.release(discard=exc_type is not None)


#: an rlhooks lock file holds one short JSON record (pid, host, start, command)
_LOCK_MAX = 4096
_LOCK_KEYS = frozenset({"pid", "host", "started", "command"})


def _names(path: Path, fh: Any) -> bool:
    """Whether ``path`` (not followed) is the open file ``fh``."""
    try:
        now, mine = os.lstat(path), os.fstat(fh.fileno())
    except OSError:
        return False
    return (now.st_ino, now.st_dev) == (mine.st_ino, mine.st_dev)


def _kind(path: Path) -> str:
    """What ``path`` is, for an error message."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "missing"
    if stat.S_ISLNK(mode):
        return f"a symbolic link to {os.readlink(path)}"
    return {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device",
            stat.S_IFBLK: "a device"}.get(stat.S_IFMT(mode), "not a regular file")


def _make_dirs(path: Path) -> list[Path]:
    """``mkdir -p path``; returns the directories this call created, deepest first."""
    missing: list[Path] = []
    p = Path(os.path.abspath(path))
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    created: list[Path] = []
    for d in reversed(missing):
        try:
            os.mkdir(d)
            created.append(d)
        except FileExistsError:
            pass
    Path(path).mkdir(parents=True, exist_ok=True)  # its errors (a file in the way, a permission) as they are
    return created[::-1]


def _remove_empty(dirs: list[Path]) -> None:
    """Remove the directories (deepest first) that are still empty; never anything else."""
    for d in dirs:
        try:
            os.rmdir(d)
        except OSError:  # not empty (someone wrote there meanwhile), or gone: leave it
            return


# -- replaceable run directories -----------------------------------------------------------------


def _read_marker(path: Path) -> dict[str, Any] | None:
    """The marker's record; ``{"legacy": True}`` for an older version's plain-text marker."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return {"unreadable": True}
    try:
        rec = json.loads(text)
    except ValueError:
        return {"legacy": True}
    return rec if isinstance(rec, dict) else {"unreadable": True}


class RunDirectory:
    """``<out_dir>/<name>`` made (or replaced) by ``command``, locked until ``finish``.

    Ownership: everything the run writes is claimed *before* it is created (``claim``; the
    built-in writers and ``write_atomic`` do it), and the marker is rewritten at each new claim.
    An entry that this process created in the directory while the run held it and that nobody
    claimed (a plugin written before ``claim_output`` existed) is the run's too: it is claimed when
    the outcome is recorded (``adopt_unclaimed``). One another process put there (a user's notes) is
    not: a rerun refuses rather than delete it. When the outcome is recorded, the files inside the
    claimed entries are listed too; a rerun deletes exactly those files (and then their directories,
    once empty), nothing else.
    """

    def __init__(self, path: Path, lock: RunDirLock, command: str) -> None:
        self.path = path
        self.lock = lock
        self.command = command
        self.started = _now()
        self.finished = False
        self.status: str | None = None
        self.owned: set[str] = set()  # top-level entries this run created (claimed before creating)
        #: top-level entries present when the run started (a shared root's earlier entries): never adopted
        self.found: set[str] = set()
        #: top-level entries this process created, opened for writing or renamed into the directory while
        #: the run held it (seen by ``_audit``): the candidates of ``adopt_unclaimed``
        self.made: set[str] = set()
        self._root = os.path.abspath(path)

    @classmethod
    def create(cls, out_dir: str | Path, name: str, *, command: str, rewrites: Collection[str] | None = None,
               hint: str | None = None) -> RunDirectory:
        """Lock ``<out_dir>/<name>``, replacing a finished earlier run ``command`` made there.

        ``rewrites``: ``<out_dir>/<name>`` is a shared root (``--compare``'s) whose rerun rewrites
        these entries in place instead of deleting the earlier run's files: each must be absent or
        recorded by the earlier run, and not a link; the earlier run's other entries stay, and stay
        owned. ``hint``: what to do, in a refusal. A refusal leaves no lock file and no directory behind.
        """
        problem = check_run_name(name)
        if problem:
            raise RunDirError(f"run.name {problem}")
        problem = check_path_text(out_dir)
        if problem:
            raise RunDirError(f"run.out_dir (--out) {problem}")
        path = Path(out_dir) / name
        if path.is_symlink():
            raise RunDirError(f"run directory {path} is {_kind(path)}; rlhooks writes a run only into a directory "
                              f"it creates or made, never through a link: remove the link, or set --out / "
                              f"run.out_dir to the directory you mean")
        lock = RunDirLock(path, command).acquire()
        try:
            kept = _clear_finished_run(path, command, rewrites=rewrites, hint=hint)
            rd = cls(path, lock, command)
            rd.found = set(os.listdir(path)) - BOOKKEEPING
            _watch_file_creation()
            rd.owned.update(kept)
            rd.owned.update(DERIVED_ENTRIES)  # `rlhooks report <run_dir>` draws into it at any time
            interrupt.outcome_recorded["status"] = None  # a new run: nothing recorded for it yet
            rd._write_marker()
        except BaseException:
            lock.release(discard=True)
            raise
        with _active_lock:
            _active.append(rd)
        return rd

    def claim(self, name: str) -> None:
        """Record the top-level entry ``name`` as this run's (call before creating it)."""
        if name in self.owned or name in BOOKKEEPING:
            return
        self.owned.add(name)
        try:
            self._write_marker()
        except OSError as exc:  # the run goes on; a rerun will refuse to delete what is not listed
            log.error(f"cannot record {name!r} in {self.path / MARKER_FILE}: {exc.strerror or exc}")

    def entries(self) -> list[str]:
        """What the run wrote: the claimed top-level entries present now."""
        return sorted(n for n in self.owned if os.path.lexists(self.path / n))

    def files(self) -> list[str]:
        """Relative paths of every file and directory inside the claimed entries, now."""
        out: list[str] = []
        for name in self.entries():
            top = self.path / name
            out.append(name)
            if top.is_dir() and not top.is_symlink():
                for root, dirs, files in os.walk(top):
                    rel = os.path.relpath(root, self.path)
                    out.extend(os.path.join(rel, n) for n in (*dirs, *files))
        return sorted(out)

    def _write_marker(self) -> None:
        rec: dict[str, Any] = {
            "made_by": self.command, "pid": os.getpid(), "host": socket.gethostname(), "started": self.started,
            "finished": _now() if self.status is not None else None, "owned": sorted(self.owned),
        }
        if self.status is not None:
            rec.update(status=self.status, entries=self.entries(), files=self.files())
        write_atomic(self.path / MARKER_FILE, json.dumps(rec, indent=1) + "\n", claim_it=False)

    def adopt_unclaimed(self) -> list[str]:
        """Claim the top-level entries that this process created in the directory while the run held it
        and nobody claimed: a plugin's (e.g. a backend written before ``claim_output`` existed, opening its
        file with ``open``), so a rerun replaces them instead of refusing. Another process's file (a user's
        notes) is not the run's; nor is one a library writes from native code (``torch.save`` to a path):
        such a plugin claims its files (``rlhooks.claim_output``)."""
        new = sorted(n for n in list(self.made) if n not in BOOKKEEPING and n not in self.owned
                     and n not in self.found and os.path.lexists(self.path / n))
        for name in new:
            self.owned.add(name)
        if new:
            log.info("recorded as the run's: written into the run directory during the run without "
                     "rlhooks.claim_output", run_dir=str(self.path), entries=new)
        return new

    def record_outcome(self, status: str) -> None:
        """Record the run's outcome and every file it owns now (the lock stays held); entries written during
        the run without a claim are the run's (``adopt_unclaimed``)."""
        self.status = status
        interrupt.note_outcome(status)
        self.adopt_unclaimed()
        try:
            self._write_marker()
        except OSError as exc:  # the run's own files matter more; a rerun will then refuse to replace
            log.error(f"cannot record the end of the run in {self.path / MARKER_FILE}: {exc.strerror or exc}")

    def finish(self, status: str | None = None) -> None:
        """Record the outcome (``status``, or the one recorded already) with the files owned now; unlock."""
        if self.finished:
            return
        self.finished = True
        try:
            self.record_outcome(status or self.status or "failed")
        finally:
            with _active_lock:
                if self in _active:
                    _active.remove(self)
            self.lock.release()

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.finished:
            interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
            self.finish(self.status or ("success" if exc_type is None else "interrupted" if interrupted else "failed"))


_active: list[RunDirectory] = []  # run directories of this process that are being written
_active_lock = threading.Lock()

#: audit events that create (or open for writing) the path they name: (event, index of that path in its args)
_CREATING = {"open": 0, "os.mkdir": 0, "os.rename": 1, "os.symlink": 1, "os.link": 1, "shutil.copyfile": 1,
             "shutil.copytree": 1, "shutil.move": 1, "sqlite3.connect": 0}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_watching = False


def _watch_file_creation() -> None:
    """Install (once per process) the audit hook that sees which files this process creates in a run
    directory being written (``RunDirectory.made``). An audit hook, because a plugin's own ``open`` (one
    written before ``claim_output`` existed) calls nothing of rlhooks; it cannot be removed, so it returns
    at once while no run directory is being written."""
    global _watching
    if not _watching:
        sys.addaudithook(_audit)
        _watching = True


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Note a path this process creates inside an active run directory. Never raises (an exception
    in an audit hook would fail the caller's operation)."""
    if not _active or event not in _CREATING:
        return
    try:
        if event == "open":
            path, mode, flags = args[0], args[1], args[2]
            if not (flags & _WRITE_FLAGS or (isinstance(mode, str) and any(c in mode for c in "wax+"))):
                return  # read only
        else:
            path = args[_CREATING[event]]
        if path is None or isinstance(path, int):  # a file descriptor: already open
            return
        p = os.path.abspath(os.fsdecode(path))
        for rd in list(_active):
            if p.startswith(rd._root + os.sep):
                rd.made.add(p[len(rd._root) + 1:].split(os.sep, 1)[0])
    except Exception:  # noqa: BLE001,S110 - see the docstring
        pass


def claim_output(path: str | Path) -> None:
    """``rlhooks.claim_output``: record ``path`` as the run's (call before creating it), so that a rerun
    may replace it; a ``RunDirError`` if ``path`` is inside a run directory and is a symbolic link or
    lies below one (see ``refuse_run_links``), for every plugin, so nothing is written through a link
    planted in a resumed run's directory. Outside a run directory this does nothing."""
    refuse_run_links(path)
    claim(path)


def claim(path: str | Path) -> None:
    """Record ``path`` as written by the run whose directory holds it (call before creating it).

    A rerun deletes only what its run claimed; a third-party backend writing into the run
    directory calls this (``rlhooks.claim_output``, which also refuses links) so that a rerun may
    replace its files. Outside a run directory this does nothing.
    """
    if not _active:
        return
    p = os.path.abspath(path)
    with _active_lock:
        active = list(_active)
    for rd in active:
        root = os.path.abspath(rd.path)
        if p != root and p.startswith(root + os.sep):
            rd.claim(p[len(root) + 1:].split(os.sep, 1)[0])


_OPEN_FLAGS = {"w": os.O_CREAT | os.O_TRUNC, "a": os.O_CREAT | os.O_APPEND, "x": os.O_CREAT | os.O_EXCL}


def open_output(path: str | Path, mode: str = "w", *, encoding: str | None = None, newline: str | None = None,
                buffering: int = -1) -> IO[Any]:
    """Open a file a plugin writes in the run directory: claimed first (a rerun may replace it), its
    directories made, never through a symbolic link. Returns the open file, like ``open(path, mode)``.

    ``mode`` is ``w``, ``a`` or ``x``, with ``b`` and ``+`` as ``open`` takes them; text files are
    UTF-8 unless ``encoding`` says otherwise. Outside a run directory the file is opened the same way,
    and nothing is claimed.
    """
    kind = mode.replace("b", "").replace("+", "").replace("t", "")
    if kind not in _OPEN_FLAGS or len(set(mode)) != len(mode) or not set(mode) <= set("waxbt+"):
        raise ValueError(f"open_output: mode must be 'w', 'a' or 'x' (with 'b' or '+'), got {mode!r}; "
                         f"read files with open()")
    path = Path(path)
    claim_output(path)
    _refuse_linked_parents(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = _OPEN_FLAGS[kind] | (os.O_RDWR if "+" in mode else os.O_WRONLY) | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RunDirError(f"{path} is a symbolic link; rlhooks never writes through one (it may point "
                              f"outside the run directory): remove it or write another file") from None
        raise
    if "b" in mode:
        return os.fdopen(fd, mode, buffering)
    return os.fdopen(fd, mode, buffering, encoding=encoding or "utf-8", newline=newline)


def check_path_text(path: Any) -> str | None:
    """Why ``path`` cannot be written as a file name (not valid UTF-8, a NUL), or None."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\x00" in text:
        return f"must not contain a NUL character: {text!r}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start:exc.end].encode("utf-8", "surrogateescape")
        return (f"is not valid UTF-8 (bytes {bad!r} at character {exc.start} of "
                f"{text.encode('utf-8', 'surrogateescape')!r}); rename it with UTF-8 characters only")
    return None


def _walk_present(path: Path) -> list[str]:
    """Relative paths of everything in ``path`` (files and directories), minus rlhooks' bookkeeping."""
    out: list[str] = []
    for root, dirs, files in os.walk(path):
        rel = os.path.relpath(root, path)
        for n in (*dirs, *files):
            r = n if rel == "." else os.path.join(rel, n)
            if r not in BOOKKEEPING:
                out.append(r)
    return sorted(out)


def check_replaceable(path: str | Path, command: str, *, rewrites: Collection[str] | None = None,
                      hint: str | None = None) -> None:
    """Raise the ``RunDirError`` a rerun of ``command`` in ``path`` would raise; delete nothing.
    (``--compare`` checks all its runs first, so a refusal leaves every earlier run as it was.)"""
    if Path(path).is_symlink():
        raise RunDirError(f"run directory {path} is {_kind(Path(path))}; rlhooks never writes a run through a link: "
                          f"remove the link, or set --out / run.out_dir to the directory you mean")
    _clear_finished_run(Path(path), command, dry_run=True, rewrites=rewrites, hint=hint)


def _clear_finished_run(path: Path, command: str, *, dry_run: bool = False, rewrites: Collection[str] | None = None,
                        hint: str | None = None) -> set[str]:
    """Delete exactly the files a finished earlier run of ``command`` recorded in ``path``; refuse
    anything else, having deleted nothing. With ``rewrites`` (a shared root) delete nothing: check
    those entries and return the earlier run's entries that stay owned."""
    present = _walk_present(path)
    if not present and not (path / MARKER_FILE).exists():
        return set()
    marker = _read_marker(path / MARKER_FILE)
    hint = hint or "choose another run.name or --out, or move it away yourself"
    if marker is None or marker.get("unreadable"):
        raise RunDirError(
            f"run directory {path} exists and was not made by '{command}'; {hint} "
            f"(rlhooks never deletes or takes over a directory it did not create)"
        )
    made_by = "rlhooks simulate" if marker.get("legacy") else marker.get("made_by")
    if isinstance(made_by, str) and made_by != command:
        raise RunDirError(f"{path} holds a run of '{made_by}', not of '{command}', so it is neither replaced nor "
                          f"taken over; {hint}")
    if rewrites is not None:
        return _check_rewrites(path, marker, present, rewrites, hint)
    if marker.get("legacy") or "files" not in marker:
        # an older version's run: it did not record the files inside its directories
        top = sorted(n for n in present if os.sep not in n)
        allowed = LEGACY_ENTRIES if marker.get("legacy") else {n for n in marker.get("entries", []) if isinstance(n, str)}
        if not marker.get("legacy") and marker.get("finished") is None:
            raise RunDirError(f"run directory {path} holds a run that did not finish ({_holder_text(marker)}; "
                              f"killed or crashed), so it is not replaced; {hint}")
        foreign = [n for n in top if n not in allowed]
        dirs = [n for n in top if n in allowed and (path / n).is_dir() and not (path / n).is_symlink()]
        if foreign:
            raise RunDirError(f"run directory {path} holds {foreign[0]!r}, which the earlier run did not write, "
                              f"so nothing is replaced; {hint}")
        if marker.get("legacy") and "summary.json" not in top:
            raise RunDirError(f"run directory {path} holds an older rlhooks simulate run without summary.json "
                              f"(it did not finish), so nothing is replaced; {hint}")
        if dirs:
            raise RunDirError(
                f"run directory {path} holds {dirs[0]!r}, a directory of an older rlhooks run that did not record "
                f"the files it wrote there, so nothing is replaced (rlhooks never deletes a directory wholesale); {hint}"
            )
        recorded = set(top)
    else:
        if marker.get("finished") is None:
            raise RunDirError(
                f"run directory {path} holds a run that did not finish ({_holder_text(marker)}; killed or "
                f"crashed), so it is not replaced; {hint}"
            )
        recorded = {n for n in marker.get("files", []) if isinstance(n, str)}
        foreign = [n for n in present if n not in recorded]
        if foreign:
            raise RunDirError(
                f"run directory {path} holds {foreign[0]!r}, which the earlier run did not write, so nothing is "
                f"replaced; {hint}{_unclaimed_hint(path, foreign[0], marker)}"
            )
    if dry_run:
        return set()
    log.info("replacing the earlier run", run_dir=str(path))
    # deepest first, so a directory is empty when its turn comes (anything foreign was refused above);
    # only what os.walk saw, which never descends through a symlink
    for rel in sorted(recorded & set(present), key=lambda r: (-r.count(os.sep), r)):
        target = path / rel
        if target.is_dir() and not target.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                target.rmdir()
        else:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
    with contextlib.suppress(FileNotFoundError):
        (path / MARKER_FILE).unlink()
    return set()


def _check_rewrites(path: Path, marker: dict[str, Any], present: list[str], rewrites: Collection[str],
                    hint: str) -> set[str]:
    """A shared root's rerun: the entries it rewrites must be the earlier run's (recorded) and no link."""
    if marker.get("finished") is None:
        raise RunDirError(f"{path} holds a run that did not finish ({_holder_text(marker)}; killed or crashed), "
                          f"so nothing is written there; {hint}")
    recorded = {n for n in marker.get("files", []) if isinstance(n, str)}
    for entry in sorted(rewrites):
        if os.path.islink(path / entry):
            raise RunDirError(f"{path} holds {entry!r}, {_kind(path / entry)}, which rlhooks never writes through, "
                              f"so nothing is written; {hint}")
        for rel in present:
            if (rel == entry or rel.startswith(entry + os.sep)) and rel not in recorded:
                raise RunDirError(f"{path} holds {rel!r}, which the earlier run did not write, so nothing is "
                                  f"written; {hint}")
    return {n for n in marker.get("owned", []) if isinstance(n, str) and os.path.lexists(path / n)}


def _unclaimed_hint(run_dir: Path, rel: str, marker: dict[str, Any]) -> str:
    """When ``rel`` was last written while the earlier run ran (though not by its process, whose files
    are the run's), a plugin may have made it without claiming it: say how a plugin claims its files."""
    try:
        mtime = os.lstat(run_dir / rel).st_mtime
        started = _dt.datetime.fromisoformat(str(marker["started"])).timestamp()
        finished = _dt.datetime.fromisoformat(str(marker["finished"])).timestamp()
    except (OSError, KeyError, TypeError, ValueError):
        return ""
    if not started - 1 <= mtime <= finished + 2:  # timestamps are to the second
        return ""
    return (f". {rel!r} was written while the earlier run ran, but not by the run's own process (another process, "
            f"or a library writing from native code such as torch.save to a path), so it is not taken for the "
            f"run's: if a plugin made it, that plugin must call rlhooks.claim_output(path) before creating the file "
            f"(or create it with rlhooks.open_output(path)), so that a rerun may replace it")


def unrecorded(path: str | Path) -> set[str]:
    """What is under ``path`` (e.g. ``<run_dir>/report``) that the finished run holding it did not record:
    files someone put there after the run ended. Paths relative to the run directory; empty when the
    run has not finished (its end lists what is there then) or has no marker. Call before writing, and
    pass it to ``adopt_derived`` as ``exclude``."""
    p = Path(path).absolute()
    marker = _read_marker(p.parent / MARKER_FILE)
    if not marker or "files" not in marker or marker.get("finished") is None or not os.path.lexists(p):
        return set()
    recorded = {n for n in marker.get("files", []) if isinstance(n, str)}
    found = {p.name}
    if p.is_dir() and not p.is_symlink():
        for root, dirs, names in os.walk(p):
            rel = os.path.relpath(root, p.parent)
            found.update(os.path.join(rel, n) for n in (*dirs, *names))
    return found - recorded


def adopt_derived(path: str | Path, *, exclude: Collection[str] = ()) -> bool:
    """Record ``path`` (e.g. ``<run_dir>/report``, drawn later by ``rlhooks report``) as the finished
    run's own, with the files in it now, so that a rerun of that run replaces it instead of refusing.
    ``exclude``: what was there before and is not the run's (``unrecorded``): never recorded, so a
    rerun refuses rather than delete it.

    Only for a finished run that rlhooks made and nobody holds; True if recorded. Never deletes.
    """
    p = Path(path).absolute()
    run_dir = p.parent
    marker_path = run_dir / MARKER_FILE
    marker = _read_marker(marker_path)
    if not marker or "files" not in marker or marker.get("finished") is None:
        return False
    try:
        lock = RunDirLock(run_dir, "rlhooks report").acquire()
    except RunDirInUse:  # a run is writing there: it owns report/ from its start, its end lists the files
        return False
    try:
        marker = _read_marker(marker_path) or {}
        if "files" not in marker or marker.get("finished") is None:
            return False
        name = p.name
        files = {n for n in marker.get("files", []) if isinstance(n, str)} | ({name} - set(exclude))
        if p.is_dir() and not p.is_symlink():
            for root, dirs, names in os.walk(p):
                rel = os.path.relpath(root, run_dir)
                files.update(r for r in (os.path.join(rel, n) for n in (*dirs, *names)) if r not in exclude)
        for key in ("owned", "entries"):
            marker[key] = sorted({*marker.get(key, []), name})
        marker["files"] = sorted(files)
        write_atomic(marker_path, json.dumps(marker, indent=1) + "\n", claim_it=False)
        return True
    finally:
        lock.release()


# -- atomic files ----------------------------------------------------------------------------------


def write_atomic(path: str | Path, text: str | bytes, encoding: str = "utf-8", *, claim_it: bool = True) -> Path:
    """Write ``path`` all at once (see ``open_atomic``): a temporary file beside it, fsync, rename.

    On any error (a full disk, ENOSPC) the temporary file is removed and the OSError raised;
    an earlier ``path`` is left as it was, and no empty or partial ``path`` is ever seen.
    """
    with open_atomic(path, claim_it=claim_it) as fh:
        fh.write(text.encode(encoding) if isinstance(text, str) else text)
    return Path(path)


@contextlib.contextmanager
def open_atomic(path: str | Path, *, claim_it: bool = True) -> Iterator[BinaryIO]:
    """``with open_atomic(path) as fh:`` write a file a run owns: never through a link, whole or not at all.

    Yields a binary file, a temporary file beside ``path``; when the block ends cleanly it is flushed,
    fsynced and renamed over ``path``, else removed (an earlier ``path`` stays as it was). The rename
    replaces a link at ``path`` instead of writing through it. Inside a run directory being written,
    ``path`` is claimed as the run's first (see ``claim``), and a link between the run directory and
    ``path`` (a ``report`` that is a link) is refused with a ``RunDirError`` naming it.
    """
    path = Path(path)
    if claim_it:
        claim(path)
        refuse_run_links(path.parent)  # a plugin's write_atomic too: a link at `path` itself is replaced, never followed
    _refuse_linked_parents(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)  # mkstemp makes 0600; run files are as readable as the others
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:  # say which file could not be written
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def _refuse_linked_parents(path: Path) -> None:
    """Raise if a directory between an active run directory and ``path`` is a link."""
    with _active_lock:
        roots = [Path(os.path.abspath(rd.path)) for rd in _active]
    p = Path(os.path.abspath(path))
    for root in roots:
        if root not in p.parents:
            continue
        for d in reversed(p.parents):
            if d == root or root in d.parents:
                if d.is_symlink():
                    raise RunDirError(f"{d} is {_kind(d)}: rlhooks never writes a run's file ({path.name}) through "
                                      f"a link; remove the link (the run's own output never is one)")


def refuse_link(path: str | Path, run_dir: str | Path) -> None:
    """Raise a ``RunDirError`` if ``path`` inside ``run_dir``, or a directory between them, is a symbolic
    link: a backend's output directory in a run directory that is not cleared (a resumed run's) may have
    had one planted. A ``path`` outside ``run_dir`` (a directory the user configured) is not checked."""
    p, root = Path(os.path.abspath(path)), Path(os.path.abspath(run_dir))
    if root not in p.parents:
        return
    for d in [*reversed(p.parents), p]:
        if root in d.parents and d.is_symlink():
            raise RunDirError(f"{d} is {_kind(d)}: rlhooks never writes a run's output ({p.name}) through a link "
                              f"into a place it does not own; remove the link (its target is not touched), or set "
                              f"the plugin's path option to the directory you mean")


def refuse_run_links(path: str | Path) -> None:
    """Raise a ``RunDirError`` if ``path`` is inside a run directory and is a symbolic link, or a directory
    between them is one. A run directory is any directory holding rlhooks' lock file (every engine's
    run holds it while it runs, in whatever process the plugin runs); a ``path`` outside one (a directory
    the user configured) is not checked. For a plugin's files: ``claim_output`` and ``open_output``."""
    p = Path(os.path.abspath(path))
    for parent in p.parents:
        if parent.is_symlink():  # a run directory is never a link (the lock refuses one): the link is below a root
            continue
        try:
            is_root = stat.S_ISREG(os.lstat(parent / LOCK_FILE).st_mode)
        except OSError:
            continue
        if is_root:
            refuse_link(p, parent)


def lock_holder(run_dir: str | Path) -> dict[str, Any]:
    """The record of the process holding ``run_dir``'s lock as this process holds it (its pid, host, start);
    empty when this process does not hold it."""
    key = os.path.realpath(run_dir)
    with _held_lock:
        held = _held.get(key)
        return _read_holder(held[0]) if held is not None and held[0] is not None else {}


def adopt_lock(run_dir: str | Path, holder: dict[str, Any], command: str = "rlhooks") -> RunDirLock:
    """In a process another one started for its run (``rlhooks train``'s Ray TaskRunner): hold ``run_dir``'s
    lock on behalf of ``holder`` (``lock_holder`` in that process), which keeps the flock. Accepted only when
    the lock file is locked and names that holder; a free lock (its holder is gone) is taken as ``acquire``
    takes it, and one another run holds is refused (RunDirInUse) as ever. Release it like any lock."""
    lock = RunDirLock(run_dir, command)
    try:
        return lock.acquire()
    except RunDirInUse:
        try:
            fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            raise RunDirInUse(f"run directory {run_dir} is locked and its lock file cannot be read") from None
        with os.fdopen(fd, encoding="utf-8") as fh:
            info = _read_holder(fh)
        if not holder or any(info.get(k) != holder.get(k) for k in ("pid", "host", "started")):
            raise
    key = os.path.realpath(run_dir)
    with _held_lock:
        held = _held.setdefault(key, [None, 0, False, []])
        held[1] += 1
    lock._key = key
    return lock


@contextlib.contextmanager
def locked(run_dir: str | Path, command: str = "rlhooks") -> Iterator[RunDirLock]:
    """``with locked(run_dir):`` hold the run directory's lock for the block."""
    lock = RunDirLock(run_dir, command).acquire()
    try:
        yield lock
    except BaseException:  # refused or failed: what the lock created is removed again if nothing else is there
        lock.release(discard=True)
        raise
    lock.release()


__all__ = [
    "RunDirError", "RunDirInUse", "RunDirLock", "RunDirectory", "check_run_name", "check_path_text", "claim",
    "claim_output", "open_output", "open_atomic", "refuse_link", "refuse_run_links", "safe_run_name", "write_atomic",
    "locked", "adopt_lock", "lock_holder",
    "LOCK_FILE", "MARKER_FILE",
]

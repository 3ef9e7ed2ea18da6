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
  The lock file itself is never deleted (deleting it would let two processes lock two different
  files of the same name). Re-entrant within a process: an engine's CLI and its RunManager may
  both hold it.
* ``RunDirectory``: a directory a command *replaces* on a rerun (``rlhooks simulate``). It is
  marked with ``.rlhooks-simulate`` (JSON: who made it, pid, host, start, and once the run
  ended its status and the entries it wrote). A rerun replaces only a directory with that
  marker whose run *finished*, and deletes only the entries the marker lists; anything else
  in it (a file a user added, a run that was killed and never finished) makes it refuse,
  having deleted nothing.
* ``write_atomic``: a run-end file (summary.json, ...) is written to a temporary file in the
  same directory, flushed to disk and renamed over the target: readers see the old file or
  the whole new one, never a 0-byte or partial file, also when the disk is full.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

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


class RunDirError(RLHooksError):
    """A run directory cannot be used: in use by another run, or not safe to replace."""


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
        self.run_dir.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.run_dir)
        with _held_lock:
            held = _held.get(key)
            if held is not None:  # this process already holds it (an engine CLI and its RunManager)
                held[1] += 1
                self._key = key
                return self
            fh = open(self.run_dir / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 - held until release
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                info = _read_holder(fh)
                fh.close()
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RunDirError(f"cannot lock run directory {self.run_dir}: {exc.strerror or exc}") from None
                raise RunDirError(
                    f"run directory {self.run_dir} is in use by another run ({_holder_text(info) or 'unknown process'}); "
                    f"wait for it to finish, stop it, or choose another run.name / --out"
                ) from None
            stale = _read_holder(fh)
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
            _held[key] = [fh, 1]
            self._key = key
        return self

    def release(self) -> None:
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
            fh = held[0]
            try:
                fh.seek(0)
                fh.truncate()  # an empty lock file: the last run ended cleanly
                fh.flush()
            except OSError:
                pass  # e.g. disk gone; the kernel lock still goes away with the file
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
                fh.close()

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


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
    When the outcome is recorded, the files inside the claimed entries are listed too; a rerun
    deletes exactly those files (and then their directories, once empty), nothing else.
    """

    def __init__(self, path: Path, lock: RunDirLock, command: str) -> None:
        self.path = path
        self.lock = lock
        self.command = command
        self.started = _now()
        self.finished = False
        self.status: str | None = None
        self.owned: set[str] = set()  # top-level entries this run created (claimed before creating)

    @classmethod
    def create(cls, out_dir: str | Path, name: str, *, command: str) -> RunDirectory:
        """Lock ``<out_dir>/<name>``, replacing a finished earlier run ``command`` made there."""
        problem = check_run_name(name)
        if problem:
            raise RunDirError(f"run.name {problem}")
        problem = check_path_text(out_dir)
        if problem:
            raise RunDirError(f"run.out_dir (--out) {problem}")
        path = Path(out_dir) / name
        lock = RunDirLock(path, command).acquire()
        try:
            _clear_finished_run(path, command)
            rd = cls(path, lock, command)
            interrupt.outcome_recorded["status"] = None  # a new run: nothing recorded for it yet
            rd._write_marker()
        except BaseException:
            lock.release()
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

    def record_outcome(self, status: str) -> None:
        """Record the run's outcome and every file it owns now (the lock stays held)."""
        self.status = status
        interrupt.note_outcome(status)
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


def claim(path: str | Path) -> None:
    """Record ``path`` as written by the run whose directory holds it (call before creating it).

    A rerun deletes only what its run claimed; a third-party backend writing into the run
    directory calls this (``rlhooks.claim_output``) so that a rerun may replace its files.
    Outside a run directory this does nothing.
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
    claim(path)
    _refuse_symlinked_parents(path)
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


def _refuse_symlinked_parents(path: Path) -> None:
    """A directory between the run directory holding ``path`` and ``path`` must not be a symlink."""
    p = os.path.abspath(path)
    with _active_lock:
        roots = [os.path.abspath(rd.path) for rd in _active]
    for root in roots:
        if not p.startswith(root + os.sep):
            continue
        parts = Path(p[len(root) + 1:]).parts[:-1]
        current = Path(root)
        for part in parts:
            current = current / part
            if current.is_symlink():
                raise RunDirError(f"{current} is a symbolic link; rlhooks never writes through one into a place "
                                  f"the run does not own: remove it or write elsewhere")


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


def check_replaceable(path: str | Path, command: str) -> None:
    """Raise the ``RunDirError`` a rerun of ``command`` in ``path`` would raise; delete nothing.
    (``--compare`` checks all its runs first, so a refusal leaves every earlier run as it was.)"""
    _clear_finished_run(Path(path), command, dry_run=True)


def _clear_finished_run(path: Path, command: str, *, dry_run: bool = False) -> None:
    """Delete exactly the files a finished earlier run of ``command`` recorded in ``path``; refuse
    anything else, having deleted nothing."""
    present = _walk_present(path)
    if not present and not (path / MARKER_FILE).exists():
        return
    marker = _read_marker(path / MARKER_FILE)
    hint = "choose another run.name or --out, or move it away yourself"
    if marker is None or marker.get("unreadable"):
        raise RunDirError(
            f"run directory {path} exists and was not made by '{command}'; {hint} "
            f"(rlhooks never deletes a directory it did not create)"
        )
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
        return
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


def _unclaimed_hint(run_dir: Path, rel: str, marker: dict[str, Any]) -> str:
    """When ``rel`` was last written while the earlier run ran, a plugin of it most likely made it
    without claiming it: say how a plugin claims its files."""
    try:
        mtime = os.lstat(run_dir / rel).st_mtime
        started = _dt.datetime.fromisoformat(str(marker["started"])).timestamp()
        finished = _dt.datetime.fromisoformat(str(marker["finished"])).timestamp()
    except (OSError, KeyError, TypeError, ValueError):
        return ""
    if not started - 1 <= mtime <= finished + 2:  # timestamps are to the second
        return ""
    return (f". {rel!r} was written while the earlier run ran, so a plugin of that run probably made it without "
            f"claiming it: a plugin that writes into the run directory must call rlhooks.claim_output(path) "
            f"before creating the file (or create it with rlhooks.open_output(path)), so that a rerun may replace it")


def adopt_derived(path: str | Path) -> bool:
    """Record ``path`` (e.g. ``<run_dir>/report``, drawn later by ``rlhooks report``) as the finished
    run's own, with the files in it now, so that a rerun of that run replaces it instead of refusing.

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
    except RunDirError:  # a run is writing there: its own end records what it owns
        return False
    try:
        marker = _read_marker(marker_path) or {}
        if "files" not in marker or marker.get("finished") is None:
            return False
        name = p.name
        files = {n for n in marker.get("files", []) if isinstance(n, str)} | {name}
        if p.is_dir() and not p.is_symlink():
            for root, dirs, names in os.walk(p):
                rel = os.path.relpath(root, run_dir)
                files.update(os.path.join(rel, n) for n in (*dirs, *names))
        for key in ("owned", "entries"):
            marker[key] = sorted({*marker.get(key, []), name})
        marker["files"] = sorted(files)
        write_atomic(marker_path, json.dumps(marker, indent=1) + "\n", claim_it=False)
        return True
    finally:
        lock.release()


# -- atomic files ----------------------------------------------------------------------------------


def write_atomic(path: str | Path, text: str | bytes, encoding: str = "utf-8", *, claim_it: bool = True) -> Path:
    """Write ``path`` all at once: a temporary file beside it, fsync, rename over ``path``.

    Inside a run directory being written, ``path`` is claimed as the run's first (see ``claim``).

    On any error (a full disk, ENOSPC) the temporary file is removed and the OSError raised;
    an earlier ``path`` is left as it was, and no empty or partial ``path`` is ever seen.
    """
    path = Path(path)
    data = text.encode(encoding) if isinstance(text, str) else text
    if claim_it:
        claim(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)  # mkstemp makes 0600; run files are as readable as the others
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:  # say which file could not be written
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    return path


@contextlib.contextmanager
def locked(run_dir: str | Path, command: str = "rlhooks") -> Iterator[RunDirLock]:
    """``with locked(run_dir):`` hold the run directory's lock for the block."""
    lock = RunDirLock(run_dir, command).acquire()
    try:
        yield lock
    finally:
        lock.release()


__all__ = [
    "RunDirError", "RunDirLock", "RunDirectory", "check_run_name", "check_path_text", "claim", "open_output",
    "safe_run_name", "write_atomic", "locked",
    "LOCK_FILE", "MARKER_FILE",
]

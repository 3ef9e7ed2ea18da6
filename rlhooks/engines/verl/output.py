"""``rlhooks train``'s terminal: verl's output into ``<run_dir>/verl.log``, rlhooks's own lines on screen.

A 3-step V1 run prints ~1,800 lines (verl's config dump, every worker's repeated warnings, Ray's forwarded
logs), among which the console backend's step lines and rlhooks's warnings are lost. While the run runs,
this process's file descriptors 1 and 2 (where verl, Ray's log forwarding and every child process write)
go to the log file; a thread follows the file and copies to the terminal the lines rlhooks wrote (the
console backend's, rlhooks's structlog lines, verl's progress bar), without Ray's ``(Actor pid=...)`` prefix.
A file, not a pipe: Ray's processes inherit the descriptors and may outlive the run, and a file never
blocks them nor ends them with SIGPIPE. ``-v`` shows everything, as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RAY_PREFIX = re.compile(r"^\((?P<who>[^()]*?pid=\d+[^()]*)\) ")
#: the console backend's lines (rlhooks/plugins/backends/console.py)
_CONSOLE = re.compile(r"^(step \d+ \| |run .+ started; output in |run ended: |── .+ · step \d+ · \d+ rows? ──)")
#: structlog's console lines (rlhooks's loggers): "2026-11-27 16:04:07 [warning  ] ..."
_STRUCTLOG = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\S* \[(debug|info|warning|error|critical|exception)\s*\] ")
#: verl's own progress bar (its fit loop's tqdm): the run's progress
_PROGRESS = re.compile(r"^Training Progress:")
#: the console backend's step line after another thread's unfinished write in the same process: it writes from the
#: dispatcher's thread while verl prints on the trainer's (print writes a line's text and its newline apart; pprint
#: writes "(" or a continuation's indent first), so verl's pprint of the step-0 validation put "(step 0 | ..." and
#: " step 0 | ..." into verl.log, not the terminal (2026-11-29)
_CONSOLE_STEP_AFTER = re.compile(r"(?<![\w/.-])(step \d+ \| .*)$")


def clean(line: str) -> tuple[str, str | None]:
    """A line without colour codes and Ray's ``(Actor pid=...)`` prefix, and that prefix (its process)."""
    text = _ANSI.sub("", line)
    m = _RAY_PREFIX.match(text)
    return (text[m.end():], m["who"]) if m else (text, None)


def _structlog_json(text: str) -> bool:
    if not text.startswith("{"):
        return False
    try:
        rec = json.loads(text)
    except ValueError:
        return False
    return isinstance(rec, dict) and "event" in rec and "level" in rec


class LineFilter:
    """Which lines of verl's output are rlhooks's: the console backend's, structlog's, verl's progress bar; a
    table's rows (indented JSON) follow its header line from the same process."""

    def __init__(self) -> None:
        self._table_of: set[str | None] = set()  # processes printing a table's rows

    def __call__(self, line: str) -> str | None:
        """The line to show (cleaned), or None."""
        text, who = clean(line.rstrip("\n"))
        frames = [f for f in text.split("\r") if f]
        text = frames[-1] if frames else ""  # a progress bar's line: its last frame
        if who in self._table_of:
            if text in ("{", "}") or text.startswith("  "):  # json.dumps(row, indent=2)
                return text
            self._table_of.discard(who)
        if _CONSOLE.match(text):
            if text.startswith("── "):
                self._table_of.add(who)
            return text
        if _STRUCTLOG.match(text) or _PROGRESS.match(text) or _structlog_json(text):
            return text
        joined = _CONSOLE_STEP_AFTER.search(text)
        return joined[1] if joined else None  # the console's part: verl's is in verl.log


class VerlOutput:
    """Descriptors 1 and 2 into ``log`` while the block runs; rlhooks's lines copied to the terminal (the
    descriptor 1 had before; ``terminal``: another one). ``show_all``: every line, as without this."""

    POLL_S = 0.2

    def __init__(self, log: Path, *, show_all: bool = False, terminal: int | None = None) -> None:
        self.log = Path(log)
        self.show_all = show_all
        self._terminal = terminal
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved: tuple[int, int] | None = None
        self._filter = LineFilter()

    def stderr(self) -> int:
        """The descriptor 2 had before the block (the terminal's stderr)."""
        return self._saved[1] if self._saved is not None else 2

    def __enter__(self) -> VerlOutput:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        start = os.fstat(fd).st_size  # a resumed run appends to the earlier run's log
        _flush()
        self._saved = (os.dup(1), os.dup(2))
        out = self._terminal if self._terminal is not None else self._saved[0]
        os.write(out, f"rlhooks train: verl's output goes to {self.log}; rlhooks's lines follow\n".encode())
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        self._thread = threading.Thread(target=self._follow, args=(start, out), name="rlhooks-verl-output",
                                        daemon=True)
        self._thread.start()
        _active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self in _active:
            _active.remove(self)
        _flush()
        assert self._saved is not None
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for fd in self._saved:
            os.close(fd)

    def _follow(self, start: int, out: int) -> None:
        """Copy rlhooks's lines written to the log past ``start`` to ``out`` until stopped (then the rest)."""
        with open(self.log, "rb") as fh:
            fh.seek(start)
            pending = b""
            while True:
                stopping = self._stop.is_set()  # read once more after the stop: nothing written before it is lost
                chunk = fh.read()
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    shown = [self._show(raw.decode("utf-8", "replace")) for raw in lines]
                    text = "".join(f"{s}\n" for s in shown if s is not None)
                    if text:
                        with contextlib.suppress(OSError):
                            os.write(out, text.encode())
                if stopping:
                    return
                self._stop.wait(self.POLL_S)

    def _show(self, line: str) -> str | None:
        return line if self.show_all else self._filter(line)


#: the VerlOutput blocks running in this process (innermost last)
_active: list[VerlOutput] = []


def terminal_stderr() -> int:
    """Where the command's own messages go (a signal's "rlhooks: SIGTERM: ..."): the terminal's stderr, also while
    a ``VerlOutput`` block sends descriptor 2 to verl.log."""
    return _active[-1].stderr() if _active else 2


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


@contextlib.contextmanager
def verl_output(log: Path, *, show_all: bool = False) -> Iterator[VerlOutput | None]:
    """``VerlOutput`` on ``log``; where the log cannot be opened, the output stays on the terminal (a warning)."""
    try:
        out = VerlOutput(log, show_all=show_all).__enter__()
    except OSError as exc:
        import structlog

        structlog.get_logger("rlhooks.verl").warning(
            f"cannot write {log} ({exc.strerror or exc}): verl's output stays on the terminal")
        yield None
        return
    try:
        yield out
    finally:
        out.__exit__(None, None, None)


__all__ = ["VerlOutput", "LineFilter", "verl_output", "clean", "terminal_stderr"]

"""Issue 18, case 8: a backend's tuning is read from its declared Options, whatever attribute holds it."""

from __future__ import annotations

import time
from pathlib import Path

import structlog

import rlhooks.host
from rlhooks.core.dispatch import tuning_options


def test_tuning_applies_when_the_plugin_keeps_its_options_under_another_attribute(dispatch_site,
                                                                                 tmp_path: Path) -> None:
    cfg = rlhooks.host.load_config({"run": {"name": "tune", "out_dir": str(tmp_path)},
                                    "backends": [{"name": "test_settings_attr", "flush_timeout_s": 0.5}, "jsonl"]})
    m = rlhooks.host.RunManager(cfg)
    rec = next(r for r in m.components if r.name == "test_settings_attr")
    t0 = time.monotonic()
    with m.running():
        m.log_metrics(1, {"a": 1.0})
    took = time.monotonic() - t0
    rec.obj.release.set()
    assert took < 10, f"the 0.5 s flush_timeout_s was ignored ({took:.1f} s; the default is 60 s)"
    assert m.final_status == "failed"  # its final flush hung: data lost


def test_a_backend_whose_options_cannot_be_found_gets_a_warning_saying_how_to_expose_them() -> None:
    import attrs

    @attrs.frozen
    class Opts:
        flush_timeout_s: float = 1.0

    class Hidden:
        Options = Opts

        def __init__(self) -> None:
            self._flush = 1.0  # the Options instance itself is not kept

    class Rec:
        name = "hidden"
        obj = Hidden()
        options = None

    with structlog.testing.capture_logs() as logs:
        assert tuning_options(Rec()) is None
    assert any("declares flush_timeout_s in its Options" in e["event"] and "self.options" in e["event"]
               for e in logs), logs

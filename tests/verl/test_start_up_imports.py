"""engines/verl/imports.py: verl's start-up imports run with the cyclic garbage collector off, then what they
made is frozen (~15% of an import's CPU; docs/DEVELOPMENT.md, "Eleventh session"); the run itself, and the
tests, run with it on."""

from __future__ import annotations

import contextlib
import gc
import weakref

import pytest

from rlhooks.engines.verl import imports


@pytest.fixture
def collector_on(monkeypatch):
    was = gc.isenabled()
    gc.enable()
    monkeypatch.setattr(imports, "_frozen", False)  # as in a fresh process
    yield
    (gc.enable if was else gc.disable)()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_the_tests_run_with_the_collector_on_and_what_collection_imported_frozen():
    assert gc.isenabled() and gc.get_freeze_count() > 10_000  # tests/conftest.py


def test_a_phase_runs_without_the_collector_frees_its_garbage_and_freezes_what_lives(collector_on):
    frozen = gc.get_freeze_count()
    with imports.collector_off():
        assert not gc.isenabled()
        made = [_Node() for _ in range(1000)]  # alive after the phase, as imported modules are
        garbage = weakref.ref(_Node())  # a cycle dropped during the phase (a composed config's copies)
        with imports.collector_off():
            pass
        assert not gc.isenabled()  # a nested phase leaves it off until the outermost ends
        assert garbage() is not None
    assert gc.isenabled() and garbage() is None
    assert gc.get_freeze_count() >= frozen + len(made)
    frozen = gc.get_freeze_count()
    with imports.collector_off():  # a second phase in the process (a second `rlhooks train` in one process)
        made = [_Node() for _ in range(1000)]
    assert gc.get_freeze_count() < frozen + len(made)  # pins nothing more


def test_the_collector_comes_back_as_it_was_also_after_an_error(collector_on):
    frozen = gc.get_freeze_count()
    with pytest.raises(ValueError), imports.collector_off():
        raise ValueError("a config error while verl's config is composed")
    assert gc.isenabled() and gc.get_freeze_count() <= frozen  # nothing of the failed phase pinned
    gc.disable()
    with imports.collector_off():
        pass
    assert not gc.isenabled()  # off before, off after: the phase does not turn on what the process turned off


def test_rlhooks_train_composes_with_the_collector_off_and_starts_the_run_with_it_on(collector_on, monkeypatch,
                                                                                    tmp_path):
    pytest.importorskip("verl.trainer.main_ppo")
    import verl.trainer.main_ppo as main_ppo

    from rlhooks.cli import main as rlhooks_main
    from rlhooks.engines.verl import main as rl_main

    seen: dict[str, bool] = {}
    compose = rl_main.compose_verl_config

    def composing(*args, **kwargs):
        seen["compose"] = gc.isenabled()
        return compose(*args, **kwargs)

    monkeypatch.setattr(rl_main, "compose_verl_config", composing)
    monkeypatch.setattr(main_ppo, "run_ppo", lambda cfg, task_runner_class: seen.setdefault("run", gc.isenabled()))
    monkeypatch.setattr(rl_main, "validate_verl_config", lambda cfg, source=None: None)
    monkeypatch.chdir(tmp_path)
    frozen = gc.get_freeze_count()
    rlhooks_main(["train", "rlhooks.run.name=r", "rlhooks.run.out_dir=runs", "trainer.default_local_dir=ckpt"])
    assert seen == {"compose": False, "run": True} and gc.isenabled()
    assert gc.get_freeze_count() > frozen
    assert rlhooks_main(["train", "rlhooks.run.name=r", "rlhooks.run.out_dir=runs", "--dry-run"]) == 0
    assert gc.isenabled()


def test_the_v1_task_runner_trains_with_the_collector_on(collector_on, monkeypatch):
    pytest.importorskip("verl.trainer.main_ppo")
    from rlhooks.engines.verl.v1 import runner

    seen = []
    monkeypatch.setattr(runner, "in_task_runner", lambda link: contextlib.nullcontext({"status": "success"}))
    monkeypatch.setattr(runner, "warn_unshared_paths", lambda config: None)
    monkeypatch.setattr(runner._VerlTaskRunnerV1, "run", lambda self, config: seen.append(gc.isenabled()))
    assert runner._TaskRunnerV1.run(object.__new__(runner._TaskRunnerV1), {}) == "success"
    assert seen == [True]

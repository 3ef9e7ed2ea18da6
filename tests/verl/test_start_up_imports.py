"""engines/verl/imports.py: verl's start-up imports run with the cyclic garbage collector off, then what they
made is frozen (~15% of an import's CPU; docs/DEVELOPMENT.md, "Eleventh session")."""

from __future__ import annotations

import gc

import pytest

from rlhooks.engines.verl import imports


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_a_start_up_phase_runs_without_the_collector_and_freezes_what_it_made(collector_on):
    frozen = gc.get_freeze_count()
    with imports.collector_off():
        assert not gc.isenabled()
        made = [[] for _ in range(1000)]  # tracked objects, alive after the phase as imported modules are
        with imports.collector_off():
            pass
        assert not gc.isenabled()  # a nested phase leaves it off until the outermost ends
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(made)
    gc.unfreeze()  # the test's own objects: back where the collector sees them


def test_the_collector_comes_back_as_it_was_also_after_an_error(collector_on):
    with pytest.raises(ValueError), imports.collector_off():
        raise ValueError("a config error while verl's config is composed")
    assert gc.isenabled()
    gc.disable()
    with imports.collector_off():
        pass
    assert not gc.isenabled()  # off before, off after: the phase does not turn on what the process turned off

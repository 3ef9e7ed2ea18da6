"""Test-wide set-up: structlog writes readable lines to stderr, as the CLI configures it; collection (each
worker imports torch, verl and Ray) is a start-up phase of rlhooks's own (rlhooks/engines/verl/imports.py: the
garbage collector off, then what lives frozen)."""

import pytest
import structlog

from rlhooks.engines.verl.imports import collector_off
from rlhooks.logging import configure_logging

configure_logging()
#: the configuration every test starts from
BASELINE_LOGGING = structlog.get_config()


#: the longest test files, collected first: `make test-slow` runs on pytest-xdist workers with ``--dist loadfile``
#: (a file's module-scoped V1 runs stay on one worker), which hands files out in collection order, so the long
#: ones start first and the short ones fill the other worker's gaps instead of trailing at the end
LONGEST_FIRST = (  # worker time in the slow suite on an idle 2-core machine, 2026-11-27 (docs/DEVELOPMENT.md)
    "tests/verl/test_v1_signals.py",  # six `rlhooks train` processes: ~830 s (2026-11-28)
    "tests/verl/test_v1_resume_async.py",  # four V1 runs: ~410 s
    "tests/verl/test_cpu_v1_async.py",  # three V1 runs: ~330 s
    "tests/reliability/test_soak.py",  # the 20,000-step soak: ~320 s
    "tests/verl/test_cpu_learner.py",  # the documented commands, four starts refused in-process: ~255 s (2026-11-29)
    "tests/verl/test_cpu_v1_learner.py",  # two V1 runs (one with every built-in of test_v1_builtins.py's): ~185 s
    "tests/verl/test_v1_resume.py",  # two V1 runs: ~175 s
    "tests/verl/test_v1_full_disk.py",  # one V1 run: ~110 s (2026-11-28)
)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session):
    """Collection in rlhooks's start-up phase (xdist's controller collects nothing; its workers do)."""
    with collector_off():
        return (yield)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _restore_structlog_config():
    """Tests (and session fixtures) that run a CLI in-process (``rlhooks simulate`` quiets info logs)
    must not change what later tests' ``structlog.testing.capture_logs`` sees."""
    structlog.configure(**BASELINE_LOGGING)
    yield
    structlog.configure(**BASELINE_LOGGING)


def _compose_once_per_overrides() -> None:
    """verl's Hydra compose (``compose_verl_config``: ~2 s each on 2 cores, and the verl config tests call it
    with the same overrides many times) composes each packaged-config override list once per test process;
    every call gets its own deep copy (struct flag kept), so a test that edits its config changes no other's.
    A ``config_dir`` of the test's own files is composed every time (files may change between calls)."""
    import copy
    import functools

    from rlhooks.engines.verl import main as verl_main

    compose = verl_main.compose_verl_config
    composed: dict[tuple, object] = {}

    @functools.wraps(compose)
    def compose_verl_config(overrides, *, config_dir=None, config_name=verl_main.DEFAULT_CONFIG_NAME):
        if config_dir is not None:
            return compose(overrides, config_dir=config_dir, config_name=config_name)
        key = (tuple(overrides), config_name)
        if key not in composed:
            composed[key] = compose(overrides, config_name=config_name)
        return copy.deepcopy(composed[key])

    verl_main.compose_verl_config = compose_verl_config  # before the test modules import the name


_compose_once_per_overrides()

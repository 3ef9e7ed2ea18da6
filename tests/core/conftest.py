"""Fixtures for core tests: small plugin distributions installed for real with pip."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from rlhooks.core.registry import Registry

from ..installed_sites import pip_install, shared_site, write_dist


BACKEND_CODE = '''
    from rlhooks import hookimpl

    class Backend:
        """A backend from a third-party distribution."""
        def __init__(self):
            self.seen = []

        @hookimpl
        def log_metrics(self, step, metrics):
            self.seen.append((step, dict(metrics)))
'''


OPTIONS_CODE = '''
    from typing import Literal

    import attrs
    import numpy as np

    from rlhooks import Sampler, hookimpl


    @attrs.frozen(kw_only=True)
    class BackendOptions:
        log_dir: str
        interval: int = 1
        mode: Literal["online", "offline"] = "online"
        api_key: str | None = None
        ratio: float = attrs.field(default=0.5, validator=attrs.validators.le(1.0))


    class OptBackend:
        """A backend with typed options."""
        Options = BackendOptions

        def __init__(self, options):
            self.options = options
            self.logged = []

        @hookimpl
        def log_metrics(self, step, metrics):
            self.logged.append(step)


    class LengthReward:
        """A reward class that does not subclass rlhooks.RewardFunction: it scores all the same."""

        @attrs.frozen(kw_only=True)
        class Options:
            scale: float = 1.0

        def __init__(self, options):
            self.options = options

        def __call__(self, response, target, **info):
            return self.options.scale * len(response)


    class AmbiguousReward:
        """Defines __call__ and a hook: rlhooks cannot tell whether it scores."""

        def __call__(self, response, target, **info):
            return 1.0

        @hookimpl
        def on_step_end(self, step):
            return None


    class InertReward:
        """Neither scores nor observes."""


    def const_reward(response, target, **info):
        """1.0 when the response equals the target."""
        if response == "boom":
            raise RuntimeError("cannot score this one")
        return float(response == target)


    @attrs.frozen(kw_only=True)
    class Stage:
        level: int
        mode: Literal["fast", "slow"] = "fast"


    @attrs.frozen(kw_only=True)
    class FancyOptions:
        temperature: float = 1.0
        source_weights: dict[str, float] = attrs.field(factory=dict)
        stages: list[Stage] = attrs.field(factory=list)


    class FancySampler(Sampler):
        """A sampler with a legacy name."""
        Options = FancyOptions
        deprecated_names = {"OldFancySampler": "FancySampler"}

        @hookimpl
        def on_rewards_computed(self, batch):
            if "explode" in batch:  # a bug in a steering component
                raise ValueError("sampler cannot use these rewards")
            return {"fancy/feedback": 1.0}

        def __iter__(self):
            return iter(range(len(self.data)))

        def __len__(self):
            return len(self.data)

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass


    class WrongArgBackend:
        """A logging backend asking for an argument log_metrics does not have."""
        @hookimpl
        def log_metrics(self, step, metrix):
            pass


    class TypoPlugin:
        """Implements a misspelled hook."""
        @hookimpl
        def on_reward_computed(self, step, batch):
            return None


    class Exploding:
        \"\"\"Cannot be constructed.\"\"\"
        def __init__(self):
            raise OSError("no disk")


    class Counter:
        """Counts hook calls."""
        def __init__(self):
            self.calls = []

        @hookimpl
        def on_step_end(self, step, batch, metrics):
            self.calls.append(step)
            return {"counter/steps": len(self.calls)}

        def state_dict(self):
            return {"calls": list(self.calls)}

        def load_state_dict(self, state):
            self.calls = list(state["calls"])


    class StatelessSampler:
        """A duck-typed sampler (not an rlhooks.Sampler) that cannot save its position."""
        def __init__(self, options, data, *, batch_size, seed=0):
            self.data = data

        def __iter__(self):
            return iter(range(len(self.data)))

        def __len__(self):
            return len(self.data)


    class Sloppy:
        """Forgot @hookimpl on one hook and misspelled another; one hook is right."""
        def log_metrics(self, step, metrics):
            pass

        def on_step_ends(self, step, batch, metrics):
            pass

        @hookimpl
        def on_run_start(self, run):
            pass


    def _ratio(batch):
        return batch["reward"].sum() / batch["missing_column_total"]


    class Faulty:
        """Fails inside its own helper when a step ends."""
        @hookimpl
        def on_step_end(self, step, batch):
            return {"faulty/ratio": _ratio(batch)}
'''


@pytest.fixture(scope="session")
def installed_dists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four distributions pip-installed into one target dir, once per test run (put on sys.path by `third_party`):

    * ``alpha-plugins 1.0`` registers backend ``shared_name`` and ``alpha_only``;
    * ``beta-plugins 2.3`` registers backend ``shared_name`` too (a duplicate);
    * ``broken-plugins 0.1`` registers backend ``broken_one`` whose module fails to import;
    * ``options-plugins 0.2`` registers components with typed Options (see OPTIONS_CODE).
    """
    return shared_site(tmp_path_factory, "core-dists", _install_core_dists)


def _install_core_dists(root: Path) -> Path:
    target = root / "site"
    alpha = write_dist(root, "alpha-plugins", "1.0", "alpha_plugins", BACKEND_CODE,
                       {"rlhooks.backends": {"shared_name": "alpha_plugins:Backend", "alpha_only": "alpha_plugins:Backend"}})
    beta = write_dist(root, "beta-plugins", "2.3", "beta_plugins", BACKEND_CODE,
                      {"rlhooks.backends": {"shared_name": "beta_plugins:Backend"}})
    broken = write_dist(root, "broken-plugins", "0.1", "broken_plugins",
                        "import a_module_that_does_not_exist_anywhere\n",
                        {"rlhooks.backends": {"broken_one": "broken_plugins:Backend"}})
    opts = write_dist(root, "options-plugins", "0.2", "options_plugins", OPTIONS_CODE,
                      {"rlhooks.backends": {"opt_backend": "options_plugins:OptBackend",
                                            "wrong_arg_backend": "options_plugins:WrongArgBackend"},
                       "rlhooks.rewards": {"const_reward": "options_plugins:const_reward",
                                           "length_reward": "options_plugins:LengthReward",
                                           "ambiguous_reward": "options_plugins:AmbiguousReward",
                                           "inert_reward": "options_plugins:InertReward"},
                       "rlhooks.samplers": {"FancySampler": "options_plugins:FancySampler",
                                            "stateless": "options_plugins:StatelessSampler",
                                            "OldFancySampler": "options_plugins:FancySampler"},
                       "rlhooks.plugins": {"sloppy": "options_plugins:Sloppy", "faulty": "options_plugins:Faulty",
                                           "typo_plugin": "options_plugins:TypoPlugin",
                                           "counter": "options_plugins:Counter",
                                           "exploding": "options_plugins:Exploding"}})
    pip_install(target, alpha, beta, broken, opts)
    return target


@pytest.fixture
def third_party(installed_dists: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(installed_dists))
    importlib.invalidate_caches()
    return installed_dists


@pytest.fixture
def reg(third_party: Path) -> Registry:
    """A registry that sees the pip-installed test distributions."""
    return Registry()


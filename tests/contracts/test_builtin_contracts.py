"""Every contract against every built-in plugin, found through the project's own entry points.

A new built-in entry point is picked up automatically (parametrized by the catalog); one that
does not import, has no contract class here, or is a backend without an output reader fails
the coverage tests at the bottom.
"""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path
from typing import Any

import pytest
from .builtin_catalog import CATALOG, Builtin, entry_points_of_dist, of_contract, options_for
from .builtin_readers import READERS

from rlhooks.testing import (
    BackendContract,
    ComponentContract,
    FilterContract,
    PromptFilterContract,
    ReadBack,
    RewardFunctionContract,
    SamplerContract,
    make_dataset,
)


def _params(contract: str) -> list[Any]:
    return [pytest.param(b, id=b.id) for b in of_contract(contract)]


class _FromCatalog:
    """Fixtures building one built-in from its catalog entry, as a config naming it would."""

    @classmethod
    def component_under_test(cls, params: dict[str, Any]) -> Any:
        # the catalog knows each built-in's class: collect only the (built-in, check) pairs that apply
        builtin = params.get("builtin")
        return builtin.obj if builtin is not None else None

    @pytest.fixture
    def component(self, builtin: Builtin) -> Any:
        return builtin.obj

    @pytest.fixture
    def component_options(self, builtin: Builtin) -> dict[str, Any]:
        return options_for(builtin)

    @pytest.fixture
    def entry_point_name(self, builtin: Builtin) -> str:
        return builtin.id


class TestBuiltinSamplers(_FromCatalog, SamplerContract):
    @pytest.fixture(params=_params("sampler"))
    def builtin(self, request: pytest.FixtureRequest) -> Builtin:
        return request.param

    @pytest.fixture
    def single_source_data(self, component_options: dict[str, Any]) -> Any:
        # curricula need their complexity source to be present
        return make_dataset(30, sources=(component_options.get("complexity_source", "gsm8k"),), seed=1)


class TestBuiltinFilters(_FromCatalog, FilterContract):
    @pytest.fixture(params=_params("filter"))
    def builtin(self, request: pytest.FixtureRequest) -> Builtin:
        return request.param


class TestBuiltinPromptFilters(_FromCatalog, PromptFilterContract):
    @pytest.fixture(params=_params("prompt_filter"))
    def builtin(self, request: pytest.FixtureRequest) -> Builtin:
        return request.param


class TestBuiltinRewardFunctions(_FromCatalog, RewardFunctionContract):
    @pytest.fixture(params=_params("reward_function"))
    def builtin(self, request: pytest.FixtureRequest) -> Builtin:
        return request.param


class TestBuiltinHookPlugins(_FromCatalog, ComponentContract):
    """Reward observers, sample tables and hook-only plugins: every hook contract plus construction."""

    requires_hooks = True

    @pytest.fixture(params=_params("hook_plugin"))
    def builtin(self, request: pytest.FixtureRequest) -> Builtin:
        return request.param

    @pytest.fixture
    def component_kind(self, builtin: Builtin) -> str:
        return builtin.kind


class TestBuiltinBackends(_FromCatalog, BackendContract):
    @pytest.fixture(params=_params("backend"))
    def builtin(self, request: pytest.FixtureRequest) -> Builtin:
        return request.param

    @pytest.fixture(autouse=True)
    def _keep(self, builtin: Builtin, capsys: pytest.CaptureFixture[str]) -> None:
        self.builtin, self.capsys = builtin, capsys

    def read_back(self, plugin: Any, run_dir: Path) -> ReadBack:
        return READERS[self.builtin.id](plugin, run_dir, self)


#: catalog contract -> the test class running it
TESTED = {
    "sampler": TestBuiltinSamplers,
    "filter": TestBuiltinFilters,
    "prompt_filter": TestBuiltinPromptFilters,
    "reward_function": TestBuiltinRewardFunctions,
    "hook_plugin": TestBuiltinHookPlugins,
    "backend": TestBuiltinBackends,
}


# -- coverage: every built-in is tested -------------------------------------------------------


def test_every_builtin_entry_point_is_in_the_catalog() -> None:
    """The catalog (via the Registry) sees every entry point the distribution declares."""
    declared = {(k, n) for k, n, _ in entry_points_of_dist()}
    cataloged = {(b.kind, n) for b in CATALOG for n in b.names}
    assert declared, "the rlhooks distribution declares no rlhooks entry points (is it installed?)"
    assert declared == cataloged, f"missing: {sorted(declared - cataloged)}, unexpected: {sorted(cataloged - declared)}"


@pytest.mark.parametrize("builtin", CATALOG, ids=[f"{b.kind}:{b.id}" for b in CATALOG])
def test_builtin_imports_and_has_a_contract(builtin: Builtin) -> None:
    assert builtin.error is None, f"built-in {builtin.kind} {builtin.names} ({builtin.value}) does not import: {builtin.error}"
    assert builtin.contract in TESTED, f"no contract test class for {builtin.kind} {builtin.id} ({builtin.contract})"


def test_every_builtin_backend_has_a_reader() -> None:
    missing = [b.id for b in of_contract("backend") if b.id not in READERS]
    assert not missing, f"built-in backends without an output reader in tests/contracts/builtin_readers.py: {missing}"


def test_every_contract_kind_has_builtins() -> None:
    """Guards the classification: each contract class runs against at least one built-in."""
    empty = [c for c in TESTED if not of_contract(c)]
    assert not empty, f"no built-in classified as {empty}; is the catalog's classification broken?"
    assert md.version("rlhooks")

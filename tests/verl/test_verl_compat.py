"""Drift against verl: the supported range at start-up, and a fingerprint of the verl code the shim relies on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl[verl-core]")

from rlhooks.cli import main as rlhooks_main  # noqa: E402
from rlhooks.engines.verl import compat  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402

pytestmark = pytest.mark.verl
SHIM = Path(compat.__file__).parent


def test_installed_verl_matches_its_recorded_fingerprint():
    version = compat.installed_verl_version()
    known, changed = compat.drift(version)
    assert known is not None, (
        f"no fingerprints recorded for the installed verl {version}: review rlhooks/engines/verl/trainer.py against "
        f"this verl's RayPPOTrainer.fit() and the members in compat.RELIED_ON, then run `{compat.RECORD_COMMAND}`"
    )
    assert not changed, (
        f"verl {version} code the rlhooks trainer restates or calls changed since it was reviewed: {changed}. "
        f"Diff each against the reviewed version, port the change into rlhooks/engines/verl/trainer.py (fit() is "
        f"restated there step by step), then run `{compat.RECORD_COMMAND}`"
    )
    assert "missing" not in compat.fingerprints().values()


def test_every_verl_member_the_shim_calls_is_fingerprinted():
    """A new self._x call on a RayPPOTrainer method must be added to compat.RELIED_ON."""
    source = (SHIM / "trainer.py").read_text()
    used = set(re.findall(r"(?:self|super\(\))\.(_[A-Za-z]\w*)", source))
    from rlhooks.engines.verl.trainer import RLHooksRayPPOTrainer

    verl_members = {n for n in used if hasattr(RayPPOTrainer, n)}
    recorded = {q.rsplit(".", 1)[1] for q in compat.RELIED_ON if ":RayPPOTrainer." in q}
    assert verl_members - recorded == set(), "fingerprint these in compat.RELIED_ON"
    assert {"_compute_old_log_prob", "_update_actor", "_balance_batch", "_load_checkpoint"} <= verl_members
    own = set(vars(RLHooksRayPPOTrainer))
    assert {"fit", "_create_dataloader", "_save_checkpoint", "_load_checkpoint"} <= own  # the overridden ones


def test_a_changed_member_is_reported(monkeypatch):
    real = compat.fingerprints()
    name = "verl.trainer.ppo.ray_trainer:RayPPOTrainer.fit"
    monkeypatch.setattr(compat, "fingerprints", lambda: {**real, name: "0" * 16})
    assert compat.drift()[1] == [name]
    assert compat.main([]) == 1


@pytest.mark.parametrize("version", ["0.8.5", "0.9.0", "0.10.0", "1.0.0", "not-a-version"])
def test_unsupported_verl_is_one_clear_error(version, monkeypatch):
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    with pytest.raises(compat.UnsupportedVerlError, match=rf"verl {re.escape(version)} is installed, but the rlhooks "
                                                          rf"verl trainer supports verl >=0.9.1,<0.10"):
        compat.check_verl_version(version)
    monkeypatch.setenv(compat.ALLOW_ENV, "1")
    assert compat.check_verl_version(version) == version  # a warning instead


def test_supported_versions_pass():
    for version in ("0.9.1", "0.9.2", "0.9.10"):
        assert compat.check_verl_version(version) == version


def test_rlhooks_train_refuses_an_unsupported_verl_at_start(monkeypatch, capsys):
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    monkeypatch.setattr(compat, "installed_verl_version", lambda: "0.10.2")
    assert rlhooks_main(["train", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert "verl 0.10.2 is installed, but the rlhooks verl trainer supports verl >=0.9.1,<0.10" in err
    assert "Traceback" not in err and "AttributeError" not in err
    monkeypatch.setattr(compat, "installed_verl_version", lambda: None)
    assert rlhooks_main(["train", "--dry-run"]) == 1
    assert "verl is not installed" in capsys.readouterr().err


def test_the_trainer_checks_the_version_before_anything_else(monkeypatch):
    from rlhooks.engines.verl.trainer import RLHooksRayPPOTrainer

    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    monkeypatch.setattr(compat, "installed_verl_version", lambda: "0.8.0")
    with pytest.raises(compat.UnsupportedVerlError, match="supports verl >=0.9.1,<0.10"):
        RLHooksRayPPOTrainer(config=None)

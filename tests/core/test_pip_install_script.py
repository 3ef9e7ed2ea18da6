"""scripts/pip_install.py, the Makefile's set-up through uv: pip's configuration read with pip itself, and turned
into uv's options, or into a fall-back to pip where a key has no translation."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pip_install.py"
spec = importlib.util.spec_from_file_location("pip_install", SCRIPT)
pip_install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_install)


def _only_this_config(monkeypatch, tmp_path: Path, text: str) -> None:
    """pip reads ``text`` as its config file (after the machine's own files) and no ``PIP_*`` variable."""
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    for key in ("HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(key, str(tmp_path))
    conf = tmp_path / "pip.conf"
    conf.write_text(text)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))


def test_pips_own_configuration_is_read_with_the_environment_winning(tmp_path, monkeypatch):
    _only_this_config(monkeypatch, tmp_path,
                      "[global]\nfind-links = /from/global\ntimeout = 30\n[install]\nconstraint = /c.txt\n")
    monkeypatch.setenv("PIP_FIND_LINKS", "/a /b")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "60")  # an alias of the file's timeout: the environment wins
    config = pip_install.pip_config()
    assert config["find-links"] == "/a /b"  # PIP_FIND_LINKS over the file's [global]
    assert config["constraint"] == "/c.txt" and config["timeout"] == "60"
    # PIP_CONFIG_FILE itself (listed as a setting) changes nothing uv does: still uv
    options, env = pip_install.uv_command(config)
    pairs = list(zip(options[3::2], options[4::2]))
    assert ("--find-links", "/a") in pairs and ("--find-links", "/b") in pairs and ("--constraint", "/c.txt") in pairs
    assert env["UV_HTTP_TIMEOUT"] == "60"


def test_pips_settings_become_uvs_options_with_pips_rule_for_several_indexes():
    options, env = pip_install.uv_command({
        "find-links": "/opt/wheels", "extra-index-url": "file:///a/simple file:///b/simple",
        "constraint": "/c.txt", "index-url": "https://example.org/simple", "cert": "/ca.crt",
        "default-timeout": "180", "disable-pip-version-check": "1"})
    assert options == ["--index-strategy", "unsafe-best-match", "--compile-bytecode",
                       "--find-links", "/opt/wheels", "--extra-index-url", "file:///a/simple",
                       "--extra-index-url", "file:///b/simple", "--constraint", "/c.txt",
                       "--index-url", "https://example.org/simple"]
    assert env == {"SSL_CERT_FILE": "/ca.crt", "UV_HTTP_TIMEOUT": "180"}


def test_a_setting_with_no_translation_installs_with_pip(capsys):
    assert pip_install.uv_command({"find-links": "/opt/wheels", "trusted-host": "example.org"}) is None
    assert "sets 'trusted-host'" in capsys.readouterr().err


def test_no_index_is_a_boolean_as_pip_reads_it():
    assert "--no-index" in pip_install.uv_command({"no-index": "true"})[0]
    assert "--no-index" not in pip_install.uv_command({"no-index": "0"})[0]

"""scripts/pip_install.py, the Makefile's set-up through uv: pip's configuration read with pip itself, and turned
into uv's options, or into a fall-back to pip where a key has no translation."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pip_install.py"
spec = importlib.util.spec_from_file_location("pip_install", SCRIPT)
pip_install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_install)


def test_pips_own_configuration_is_read_with_the_environment_winning(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /from/global\ntimeout = 30\n[install]\nconstraint = /c.txt\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", "/a /b")
    config = pip_install.pip_config()
    assert config["find-links"] == "/a /b"  # PIP_FIND_LINKS over the file's [global]
    assert config["constraint"] == "/c.txt" and config["timeout"] == "30"


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


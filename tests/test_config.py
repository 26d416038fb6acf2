"""The settings' parts agree: the TOML key table (gateway/config/keys.py)
names only fields of Config (settings.py), errors name settings as the
file spells them, and the package keeps the names its importers use.
The behaviour of each setting is tested where it acts (test_misconfiguration
for the operator's view of every refusal)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from gateway import config
from gateway.config import keys


def test_every_toml_key_names_a_setting() -> None:
    """A key naming no field would fail only when an operator writes it."""
    names = {f.name for f in fields(config.Config)}
    assert set(keys.KEYS.values()) <= names


def test_errors_name_a_setting_as_the_file_spells_it(tmp_path: Path) -> None:
    """A refused setting is named by its TOML key, the way the operator
    wrote it; one with two spellings by the current one."""
    assert keys.where("http_header_timeout") == "[http] header_timeout"
    assert keys.where("static_roots") == "[upstream] roots"
    assert keys.where("no_such_setting") == "no_such_setting"
    path = tmp_path / "gw.toml"
    path.write_text("[http]\nheader_timeout = 0\n")
    with pytest.raises(config.ConfigError, match=r"\[http\] header_timeout must be a positive"):
        config.load(path)


def test_a_setting_given_under_both_its_spellings_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text('[upstream]\nroots = ["/a"]\n[mrtr]\nstatic_roots = ["/b"]\n')
    with pytest.raises(config.ConfigError, match="are one setting"):
        config.load(path)


def test_checks_run_on_overrides_as_on_the_file() -> None:
    """The CLI wins over the file, and is checked as strictly."""
    cfg = config.Config().with_overrides(listen="http://127.0.0.1:8080/mcp", log_level="DEBUG")
    assert (cfg.listen, cfg.log_level) == ("127.0.0.1:8080", "debug")
    with pytest.raises(config.ConfigError, match="request_timeout"):
        config.Config().with_overrides(request_timeout=float("nan"))

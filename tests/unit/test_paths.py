"""The one posviz cache folder: precedence of the settings, `~` expansion, each platform, and every cache under it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from posviz.util.paths import cache_dir


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fake home and no cache settings: nothing here reads or writes the real home."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))
    for name in ("POSVIZ_CACHE_DIR", "XDG_CACHE_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(name, raising=False)
    return home


def test_posviz_setting_wins_then_xdg(home, monkeypatch, tmp_path):
    monkeypatch.setenv("POSVIZ_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("POSVIZ_CACHE_DIR")
    assert cache_dir() == tmp_path / "xdg" / "posviz"
    monkeypatch.setenv("POSVIZ_CACHE_DIR", "")  # empty counts as unset
    assert cache_dir() == tmp_path / "xdg" / "posviz"


def test_a_leading_tilde_is_the_home_folder(home, monkeypatch):
    monkeypatch.setenv("POSVIZ_CACHE_DIR", "~/posviz-cache")
    assert cache_dir() == home / "posviz-cache"
    monkeypatch.delenv("POSVIZ_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "~/xdg")
    assert cache_dir() == home / "xdg" / "posviz"


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        ("linux", ("home", ".cache", "posviz")),
        ("darwin", ("home", "Library", "Caches", "posviz")),
        ("win32", ("home", "AppData", "Local", "posviz", "Cache")),
    ],
)
def test_platform_cache_folder(home, monkeypatch, tmp_path, platform, expected):
    monkeypatch.setattr(sys, "platform", platform)
    assert cache_dir() == tmp_path.joinpath(*expected)


def test_windows_uses_localappdata(home, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert cache_dir() == tmp_path / "local" / "posviz" / "Cache"


def test_parts_are_joined_under_the_folder(home, monkeypatch, tmp_path):
    monkeypatch.setenv("POSVIZ_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir("scores", "ab.json") == tmp_path / "c" / "scores" / "ab.json"
    assert not (tmp_path / "c").exists()  # asking for a path creates nothing


def test_score_cache_and_demo_corpus_share_the_folder(home, monkeypatch):
    from posviz.scoring.cache import ScoreCache
    from posviz.train.corpus import docstrings_cache_file

    monkeypatch.setenv("XDG_CACHE_HOME", "~/xdg")
    root = home / "xdg" / "posviz"
    assert ScoreCache().root == root
    assert docstrings_cache_file().parent == root and docstrings_cache_file().name.startswith("stdlib-docstrings-")

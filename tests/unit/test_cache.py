"""The score cache: location, keys, validation of every entry, atomic and durable writes."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posviz.scoring import cache as cache_mod
from posviz.scoring.cache import CacheWarning, ScoreCache, ScoreSettings, cache_dir, local_fingerprint, make_key

RESULT = {"model": "org/m", "toeplitzness": 0.75, "toeplitzness_offdiag": 0.5, "null_mean": float("nan"), "rows": [0, 512]}


HUB = "https://huggingface.co"


def _key(revision="abc", endpoint=HUB, **settings):
    return make_key("hub:org/m", revision, ScoreSettings(**settings), endpoint=endpoint)


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("POSVIZ_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("POSVIZ_CACHE_DIR")
    assert cache_dir() == tmp_path / "xdg" / "posviz"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if sys.platform.startswith("linux"):
        assert cache_dir() == tmp_path / "home" / ".cache" / "posviz"
    assert ScoreCache().root == cache_dir()


def test_roundtrip_and_key_sensitivity(tmp_path):
    c = ScoreCache(tmp_path)
    path = c.put(_key(), RESULT)
    assert path is not None and path.is_file() and path.parent.parent == c.folder
    got = c.get(_key())
    assert got["toeplitzness"] == 0.75 and math.isnan(got["null_mean"]) and got["rows"] == [0, 512]
    # Any part of the key changes the entry.
    for other in (_key("def"), _key(normalize="cosine"), _key(null_draws=3), _key(seed=1), _key(positions="0:128"), _key(table="encoder"),
                  make_key("hub:org/other", "abc", ScoreSettings(), endpoint=HUB), _key(endpoint="http://127.0.0.1:8000")):
        assert c.get(other) is None
    assert ScoreSettings.normalize_positions("2:") == "2:" and ScoreSettings.normalize_positions(None) is None
    assert ScoreSettings.normalize_positions(slice(0, 128)) == "0:128"


def test_format_version_is_part_of_the_key(tmp_path, monkeypatch):
    c = ScoreCache(tmp_path)
    c.put(_key(), RESULT)
    monkeypatch.setattr(cache_mod, "SCORE_FORMAT", cache_mod.SCORE_FORMAT + 1)
    assert c.get(_key()) is None


def _corrupt_truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _corrupt_value(p: Path) -> None:  # valid JSON, but the number was changed: checksum catches it
    entry = json.loads(p.read_text())
    entry["result"]["toeplitzness"] = 0.99
    p.write_text(json.dumps(entry))


def _corrupt_key(p: Path) -> None:  # an entry for another key, with a valid checksum, at this key's path
    entry = json.loads(p.read_text())
    entry["key"]["revision"] = "zzz"
    entry["sha256"] = cache_mod._digest({"key": entry["key"], "result": entry["result"]})
    p.write_text(json.dumps(entry))


@pytest.mark.parametrize(
    "corrupt,reason",
    [
        (_corrupt_truncate, "not valid JSON"),
        (lambda p: p.write_bytes(b""), "not valid JSON"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "not valid JSON"),
        (lambda p: p.write_text("[1, 2, 3]"), "not a posviz score cache entry"),
        (_corrupt_value, "checksum mismatch"),
        (_corrupt_key, "different key"),
        (lambda p: p.write_bytes(b" " * (2 << 20)), "too large"),
    ],
    ids=["truncated", "empty", "binary", "foreign-json", "altered-value", "other-key", "huge"],
)
def test_corrupt_entry_is_never_returned(tmp_path, corrupt, reason):
    c = ScoreCache(tmp_path)
    path = c.put(_key(), RESULT)
    corrupt(path)
    with pytest.warns(CacheWarning, match=reason):
        assert c.get(_key()) is None
    assert not path.exists()  # removed, so the next run does not warn again
    assert c.put(_key(), RESULT) == path and c.get(_key())["toeplitzness"] == 0.75


def test_entry_without_finite_score_is_rejected(tmp_path):
    c = ScoreCache(tmp_path)
    path = c.put(_key(), {**RESULT, "toeplitzness": float("nan")})
    with pytest.warns(CacheWarning, match="no valid toeplitzness"):
        assert c.get(_key()) is None
    assert not path.exists()


@pytest.fixture
def ticking_clock(monkeypatch):
    """Entries are dated one second apart, in the order they are written (not by a wall clock that may not tick)."""
    from datetime import datetime, timedelta, timezone

    start, ticks = datetime(2026, 1, 1, tzinfo=timezone.utc), []

    class Clock(datetime):
        @classmethod
        def now(cls, tz=None):
            ticks.append(None)
            return start + timedelta(seconds=len(ticks))

    monkeypatch.setattr(cache_mod, "datetime", Clock)


def test_latest_any_revision(tmp_path, ticking_clock):
    c = ScoreCache(tmp_path)
    c.put(_key("old"), {**RESULT, "toeplitzness": 0.1})
    c.put(_key("new"), {**RESULT, "toeplitzness": 0.2})
    c.put(_key("newest-other-settings", seed=5), {**RESULT, "toeplitzness": 0.3})
    result, revision = c.latest("hub:org/m", ScoreSettings(), endpoint=HUB)
    assert revision == "new" and result["toeplitzness"] == 0.2
    assert c.latest("hub:org/m", ScoreSettings(seed=5), endpoint=HUB)[1] == "newest-other-settings"
    assert c.latest("hub:org/none", ScoreSettings(), endpoint=HUB) is None
    # A corrupt newer entry is skipped (with a warning), the valid one is used.
    newest = c.put(_key("corrupt"), {**RESULT, "toeplitzness": 0.4})
    _corrupt_truncate(newest)
    with pytest.warns(CacheWarning):
        assert c.latest("hub:org/m", ScoreSettings(), endpoint=HUB)[1] == "new"


def test_interrupted_write_keeps_the_old_entry(tmp_path, monkeypatch):
    c = ScoreCache(tmp_path)
    path = c.put(_key(), RESULT)
    before = path.read_bytes()

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        c.put(_key(), {**RESULT, "toeplitzness": 0.1})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    assert c.get(_key())["toeplitzness"] == 0.75


def test_unwritable_cache_warns_and_goes_on(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    c = ScoreCache(blocker)
    with pytest.warns(CacheWarning, match="could not write the score cache"):
        assert c.put(_key(), RESULT) is None
    assert c.get(_key()) is None and c.latest("hub:org/m", ScoreSettings(), endpoint=HUB) is None


#: A writer that stores entry 0, then entry 1, and is killed (SIGKILL: no cleanup at all) at the point named by
#: its argument, while writing entry 1: half-way through its bytes, just before the rename, just after it.
_KILLED_WRITER = """
import builtins, os, signal, sys
from posviz.scoring.cache import ScoreCache, ScoreSettings, make_key

point, folder = sys.argv[1], sys.argv[2]
real_open, real_replace, entry = builtins.open, os.replace, [0]

def kill():
    os.kill(os.getpid(), signal.SIGKILL)

class ChunkedFile:  # writes in flushed 8 kB chunks, so that a kill can land half-way through the bytes
    def __init__(self, fh):
        self.fh = fh
    def write(self, text):
        for i in range(0, len(text), 8192):
            self.fh.write(text[i:i + 8192])
            self.fh.flush()
            if point == "mid-write" and entry[0] == 1 and i >= len(text) // 2:
                kill()
    def __getattr__(self, name):
        return getattr(self.fh, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self.fh.__exit__(*exc)

def chunked_open(*args, **kwargs):
    fh = real_open(*args, **kwargs)
    return ChunkedFile(fh) if "w" in (args[1] if len(args) > 1 else kwargs.get("mode", "r")) else fh

def replace(src, dst):
    if point == "before-rename" and entry[0] == 1:
        kill()
    real_replace(src, dst)
    if point == "after-rename" and entry[0] == 1:
        kill()

builtins.open, os.replace = chunked_open, replace
c = ScoreCache(folder)
key = make_key("hub:org/m", "abc", ScoreSettings(), endpoint="https://huggingface.co")
big = ["x" * 200] * 2000  # ~400 kB per entry
for i in (0, 1):
    entry[0] = i
    c.put(key, {"toeplitzness": i / 10, "toeplitzness_offdiag": 0.5, "padding": big})
"""


@pytest.mark.parametrize("point,kept", [("mid-write", 0.0), ("before-rename", 0.0), ("after-rename", 0.1)])
def test_sigkill_while_writing_never_leaves_a_corrupt_entry(tmp_path, point, kept):
    """A writer killed while it replaces an entry leaves a valid entry: the old one until the rename, then the new."""
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, point, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # a corrupt entry would raise here
        got = ScoreCache(tmp_path).get(make_key("hub:org/m", "abc", ScoreSettings(), endpoint="https://huggingface.co"))
    assert got["toeplitzness"] == kept and len(got["padding"]) == 2000


def test_local_fingerprint_follows_rewrites(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"a" * 10)
    first = local_fingerprint([f])
    assert local_fingerprint([f]) == first
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 1_000_000))
    assert local_fingerprint([f]) != first
    second = local_fingerprint([f])
    f.write_bytes(b"a" * 11)
    assert local_fingerprint([f]) not in (first, second)


def test_temporaries_of_killed_writers_are_cleaned_up(tmp_path):
    c = ScoreCache(tmp_path)
    folder = c.path_for(_key()).parent
    folder.mkdir(parents=True)
    old, young = folder / ".x.json.old.tmp", folder / ".x.json.young.tmp"
    for p in (old, young):
        p.write_text("partial")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    c.put(_key(), RESULT)
    assert not old.exists() and young.exists()  # a young one may belong to a running writer
    assert c.get(_key())["toeplitzness"] == 0.75


# ---- hub entries are keyed by endpoint ----------------------------------------------
MIRROR = "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    "url,expected",
    [
        ("https://huggingface.co", HUB),
        ("HTTPS://HuggingFace.co:443/", HUB),
        ("https://user:secret@huggingface.co/?x=1#f", HUB),
        ("http://127.0.0.1:8000/", MIRROR),
        ("http://127.0.0.1:80", "http://127.0.0.1"),
        ("https://mirror.example:8443/hf/", "https://mirror.example:8443/hf"),
        ("http://[::1]:9000", "http://[::1]:9000"),
    ],
)
def test_endpoint_normalisation(url, expected):
    from posviz.util.endpoints import is_default_endpoint, normalize_endpoint

    assert normalize_endpoint(url) == expected
    assert is_default_endpoint(url) == (expected == HUB)


def test_hub_keys_need_an_endpoint_and_spell_it_one_way(tmp_path):
    with pytest.raises(ValueError, match="endpoint is required"):
        make_key("hub:org/m", "abc", ScoreSettings())
    with pytest.raises(ValueError, match="only for hub models"):
        make_key("path:/x", "files-1", ScoreSettings(), endpoint=HUB)
    assert "endpoint" not in make_key("path:/x", "files-1", ScoreSettings())  # local keys are unchanged
    key = _key(endpoint="http://user:pw@127.0.0.1:8000/")
    assert key == _key(endpoint=MIRROR) and key["endpoint"] == MIRROR
    c = ScoreCache(tmp_path)
    assert "pw" not in c.put(key, RESULT).read_text()
    bare = {k: v for k, v in _key().items() if k != "endpoint"}
    with pytest.raises(ValueError, match="needs its endpoint"):
        c.put(bare, RESULT)


def test_endpoints_are_never_mixed(tmp_path):
    c = ScoreCache(tmp_path)
    c.put(_key("mirror-commit", endpoint=MIRROR), {**RESULT, "toeplitzness": 0.1})
    assert c.get(_key("mirror-commit")) is None
    assert c.latest("hub:org/m", ScoreSettings(), endpoint=HUB) is None
    assert c.latest("hub:org/m", ScoreSettings(), endpoint=MIRROR + "/") == (c.get(_key("mirror-commit", endpoint=MIRROR)), "mirror-commit")
    c.put(_key("hub-commit"), {**RESULT, "toeplitzness": 0.2})
    result, revision = c.latest("hub:org/m", ScoreSettings(), endpoint=HUB)
    assert revision == "hub-commit" and result["toeplitzness"] == 0.2
    assert c.latest("hub:org/m", ScoreSettings(), endpoint=MIRROR)[1] == "mirror-commit"
    assert c.latest("hub:org/m", ScoreSettings(), endpoint="http://127.0.0.1:8001") is None
    with pytest.raises(ValueError):
        c.latest("hub:org/m", ScoreSettings())


def test_latest_of_one_revision(tmp_path, ticking_clock):
    c = ScoreCache(tmp_path)
    c.put(_key("old"), {**RESULT, "toeplitzness": 0.1})
    c.put(_key("new"), {**RESULT, "toeplitzness": 0.2})
    assert c.latest("hub:org/m", ScoreSettings(), endpoint=HUB, revision="old")[0]["toeplitzness"] == 0.1
    assert c.latest("hub:org/m", ScoreSettings(), endpoint=HUB, revision="other") is None


def _write_format_2_entry(root: Path) -> Path:
    """An entry exactly as the format-2 cache wrote it: its key has no endpoint."""
    key = {"format": 2, "model": "hub:org/m", "revision": "0" * 40, **vars(ScoreSettings())}
    path = root / "scores" / "v2" / f"org_m-{cache_mod._digest('hub:org/m')[:12]}" / f"{cache_mod._digest(key)[:32]}.json"
    path.parent.mkdir(parents=True)
    entry = {"magic": cache_mod._MAGIC, "created": "2024-01-01T00:00:00+00:00", "key": key, "result": RESULT,
             "sha256": cache_mod._digest({"key": key, "result": RESULT})}
    path.write_text(json.dumps(entry))
    return path


def test_format_2_entries_are_ignored_and_left_in_place(tmp_path):
    c = ScoreCache(tmp_path)
    old = _write_format_2_entry(tmp_path)
    before = (old.read_bytes(), old.stat().st_mtime_ns)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # not read at all, so not warned about
        assert c.latest("hub:org/m", ScoreSettings(), endpoint=HUB) is None
        assert c.get(_key("0" * 40)) is None
        c.put(_key("0" * 40), {**RESULT, "toeplitzness": 0.3})
        assert c.latest("hub:org/m", ScoreSettings(), endpoint=HUB)[0]["toeplitzness"] == 0.3
    assert (old.read_bytes(), old.stat().st_mtime_ns) == before

"""Hermetic tests: no test reads or writes the user's home, posviz cache or HF cache.

A home folder is planted with a stale posviz score cache (valid-looking entries
with absurd numbers for the eight ALBERT ids, scored against the real Hub's
endpoint as a user's would be) and a stale HF cache (a tiny ALBERT
under ``albert/albert-base-v2``). Tests that would change if they saw either (page
counts of reports, ``--plot-vs-glue`` with nothing available) are run by a second
pytest with ``HOME``, ``XDG_CACHE_HOME``, ``HF_HOME`` and ``POSVIZ_CACHE_DIR``
pointing there: they must pass and leave that home exactly as it was.

The same check for the whole suite, by hand::

    python -m tests.integration.test_hermetic plant /tmp/stale-home   # prints the variables to set
    HOME=/tmp/stale-home XDG_CACHE_HOME=... make test
    python -m tests.integration.test_hermetic check /tmp/stale-home   # lists anything created or changed
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.albert_planted import WEIGHTS, hub_id
from tests.checkpoint_factory import populate_hf_cache

ROOT = Path(__file__).resolve().parents[2]
#: The planted score of every stale entry: no real or planted checkpoint scores this.
STALE = 0.012345
#: Tests whose outcome depends on what the caches hold (module-scoped fixtures included).
SENSITIVE = (
    "tests/integration/test_report.py::test_minilm_report_pages_sections_andpdf_outline",
    "tests/integration/test_report.py::test_sigint_during_rendering_leaves_no_partial_file",
    "tests/integration/test_albert_glue.py::test_nothing_available_even_with_allow_missing",
    "tests/integration/test_albert_glue.py::test_offline_missing_models_one_line_exit_2_no_figure",
)


def _stale_row(repo_id: str, null_draws: int) -> dict:
    """A score row shaped like a real one (see ``ModelScore.to_dict``), with absurd numbers."""
    return {
        "model": repo_id, "source": f"hub {repo_id}", "family": "albert", "table": "positions",
        "tensor": "albert.embeddings.position_embeddings.weight", "positions": 512, "dim": 128, "rows": [0, 512],
        "stored_rows": 512, "dtype": "float32", "revision": "0" * 40,
        "toeplitzness": STALE, "toeplitzness_offdiag": STALE, "null_mean": STALE, "null_std": 0.0,
        "null_mean_offdiag": STALE, "null_std_offdiag": 0.0, "excess": 0.0, "excess_offdiag": 0.0,
        "normalize": "none", "null_draws": null_draws, "seed": 0, "null_method": "stale",
    }


def _plant(home: Path, albert_folder: Path) -> None:
    from posviz.scoring.cache import ScoreCache, ScoreSettings, make_key
    from posviz.util.endpoints import DEFAULT_ENDPOINT

    cache = ScoreCache(home / ".cache" / "posviz")
    for size, version in WEIGHTS:
        repo_id = hub_id(size, version)
        for draws in (0, 2, 10):  # the settings the sensitive tests use
            key = make_key(f"hub:{repo_id}", "0" * 40, ScoreSettings(null_draws=draws), endpoint=DEFAULT_ENDPOINT)
            assert cache.put(key, _stale_row(repo_id, draws))
    populate_hf_cache(home / ".cache" / "huggingface" / "hub", hub_id("base", "v2"), albert_folder)


def _environment(home: Path) -> dict[str, str]:
    """Where a user's own caches would be found: the planted home."""
    return {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "HF_HOME": str(home / ".cache" / "huggingface"),
        "HF_HUB_CACHE": str(home / ".cache" / "huggingface" / "hub"),
        "POSVIZ_CACHE_DIR": str(home / ".cache" / "posviz"),
    }


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` (folders included, so a file created then removed shows) with mtime and size."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(folder))] = (st.st_mtime_ns, st.st_size)
    out["."] = (folder.stat().st_mtime_ns, 0)
    return out


def test_session_environment_points_away_from_the_user_home():
    """Within this session every home and cache folder is the session's temporary one."""
    import huggingface_hub.constants

    from posviz.read.sources import hf_cache_dir
    from posviz.scoring.cache import cache_dir

    home, real_home = Path.home(), Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert home.name.startswith("posviz-tests-home-") and not home.is_relative_to(real_home)
    for folder in (Path(hf_cache_dir()), Path(huggingface_hub.constants.HF_HOME),
                   Path(huggingface_hub.constants.HF_HUB_CACHE), Path(os.environ["MPLCONFIGDIR"])):
        assert folder.is_relative_to(home), folder
    assert not cache_dir().is_relative_to(real_home)  # each test has its own, outside any home


def test_property_tests_draw_the_same_examples_and_write_nothing_into_the_checkout():
    """The default hypothesis profile (``ci``) is derandomised, keeps no example database, stores in the session."""
    from hypothesis import settings
    from hypothesis.configuration import storage_directory

    from tests.conftest import HERMETIC_HOME

    assert settings.default.derandomize and settings.default.database is None
    folder = storage_directory("constants")
    assert Path(getattr(folder, "path", folder)).is_relative_to(HERMETIC_HOME)  # a path, or an object with one


def test_planted_cache_would_be_read_without_the_isolation(tmp_path, monkeypatch, tiny_checkpoints):
    """The planted home is a real trap: posviz itself, pointed at it, takes the stale scores."""
    from posviz.read.sources import cached_hub_source
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.cache import ScoreCache, ScoreSettings

    home = tmp_path / "home"
    _plant(home, tiny_checkpoints("albert"))
    for name, value in _environment(home).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)  # the stale entries are the real Hub's
    others = [hub_id(*k) for k in WEIGHTS if k != ("base", "v2")]
    cmp = toeplitzness_vs_performance(others, settings=ScoreSettings(), cache=ScoreCache(), progress_label=None)
    ref = cmp.points[cmp.points["kind"] == "reference"]
    assert len(ref) == 7 and (ref["toeplitzness"] == STALE).all()
    assert cached_hub_source(hub_id("base", "v2")) is not None


@pytest.mark.slow
def test_cache_sensitive_tests_pass_against_a_planted_stale_home(tmp_path, tiny_checkpoints):
    home = tmp_path / "home"
    _plant(home, tiny_checkpoints("albert"))
    before = _snapshot(home)
    assert sum(p.endswith(".json") for p in before) >= 3 * len(WEIGHTS)

    env = {k: v for k, v in os.environ.items() if k not in {"MPLCONFIGDIR", "TORCH_HOME", "HF_DATASETS_CACHE",
                                                            "XDG_CONFIG_HOME", "XDG_DATA_HOME", "HF_HUB_OFFLINE", "HF_ENDPOINT"}}
    env.update(_environment(home))
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "inner"), *SENSITIVE]
    res = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    # every test ran and passed (none skipped)
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|skipped|failed|error)", res.stdout)}
    assert counts == {"passed": len(SENSITIVE)}, res.stdout[-2000:]

    assert _differences(before, _snapshot(home)) == ([], [], [])


def _differences(before: dict, after: dict) -> tuple[list[str], list[str], list[str]]:
    """Paths created, changed and removed."""
    created = sorted(set(after) - set(before))
    changed = sorted(p for p in set(before) & set(after) if tuple(before[p]) != tuple(after[p]))
    return created, changed, sorted(set(before) - set(after))


def main(argv: list[str]) -> int:
    """``plant HOME``: a stale home and its snapshot (beside it); ``check HOME``: what changed since."""
    if len(argv) != 2 or argv[0] not in {"plant", "check"}:
        print("usage: python -m tests.integration.test_hermetic plant|check HOME", file=sys.stderr)
        return 2
    home = Path(argv[1]).resolve()
    record = home.with_name(home.name + ".snapshot.json")
    if argv[0] == "plant":
        from tests.checkpoint_factory import build_tiny_checkpoint

        _plant(home, build_tiny_checkpoint("albert", home.with_name(home.name + ".albert")))
        record.write_text(json.dumps(_snapshot(home)))
        print(" ".join(f"{k}={v}" for k, v in _environment(home).items()))
        return 0
    created, changed, removed = _differences(json.loads(record.read_text()), _snapshot(home))
    for label, paths in (("created", created), ("changed", changed), ("removed", removed)):
        for p in paths:
            print(f"{label}: {home / p}")
    return 1 if created or changed or removed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

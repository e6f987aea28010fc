"""``posviz trajectory``: Toeplitzness along a checkpoint series (a fake MultiBERTs cache, a run folder,
the revisions of one repo in a planted HF cache and on the local Hub emulator)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.series.points import parse_step, series_name, step_from_name
from tests.checkpoint_factory import build_tiny_checkpoint
from tests.reference import dense_r2, dense_toeplitzness

N, D = 24, 8
#: Planted series: step -> weight of the sinusoidal part of E_P (more Toeplitz later).
WEIGHTS = {"0k": 0.1, "20k": 0.4, "200k": 0.7, "2000k": 0.9}


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _sinusoidal(n: int, d: int) -> np.ndarray:
    pos = np.arange(n)[:, None]
    freq = 10000.0 ** (-np.arange(0, d, 2) / d)
    out = np.empty((n, d))
    out[:, 0::2], out[:, 1::2] = np.sin(pos * freq), np.cos(pos * freq)
    return out


def _planted(folder, i: int, w: int) -> tuple:
    """A tiny BERT (pytorch_model.bin only) whose E_P is ``w`` sinusoid + ``1 - w`` noise: (folder, E_P)."""
    e = (w * _sinusoidal(N, D) + (1 - w) * np.random.default_rng(i).normal(size=(N, D))).astype(np.float32)
    folder = build_tiny_checkpoint("bert", folder, seed=i, safe_serialization=False, hidden_size=D,
                                   num_attention_heads=2, intermediate_size=16, max_position_embeddings=N,
                                   plant={"embeddings.position_embeddings.weight": e})
    assert not list(folder.glob("*.safetensors"))
    return folder, e.astype(np.float64)


@pytest.fixture
def multiberts(hf_cache, tmp_path) -> dict[str, np.ndarray]:
    """``google/multiberts-seed_0-step_*`` (BERT, pytorch_model.bin only) in an offline HF cache; id -> E_P."""
    planted = {}
    for i, (step, w) in enumerate(WEIGHTS.items()):
        folder, e = _planted(tmp_path / step, i, w)
        repo = f"google/multiberts-seed_0-step_{step}"
        hf_cache(repo, folder)
        planted[repo] = e
    return planted


def test_step_parsing():
    assert step_from_name("google/multiberts-seed_3-step_20k") == 20000
    assert step_from_name("google/multiberts-seed_3-step_0k") == 0
    assert step_from_name("org/model-step_1500") == 1500
    assert step_from_name("google/multiberts-seed_3") is None
    assert series_name("google/multiberts-seed_3-step_2000k") == "google/multiberts-seed_3"
    assert step_from_name("org/model-step-20000") == 20000 and step_from_name("EleutherAI/pythia-step1000") == 1000
    assert series_name("org/model-step-20000") == "org/model"
    assert step_from_name("org/bestep_5") is None  # "step" inside a word
    # revision names: the same rules, and a name that is only a step
    assert [parse_step(r) for r in ("step_20k", "step-20000", "step143000", "20k", "20000", "STEP_2K")] == \
        [20000, 20000, 143000, 20000, 20000, 2000]
    assert [parse_step(r) for r in ("main", "v1.0", "20kb", "")] == [None, None, None, None]


def test_hub_series_out_of_order_sorted_and_dense(multiberts, tmp_path):
    ids = list(multiberts)
    given = [ids[2], ids[0], ids[3], ids[1]]  # 200k, 0k, 2000k, 20k
    res = cli("trajectory", *given, "--format", "json", "--no-cache", "--null-draws", "2")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["step"] for r in rows] == [0, 20000, 200000, 2000000]
    assert {r["series"] for r in rows} == {"google/multiberts-seed_0"}
    for r, repo in zip(rows, ids, strict=True):
        e = multiberts[repo]
        assert r["toeplitzness"] == pytest.approx(dense_toeplitzness(e), abs=1e-6)
        assert r["toeplitzness_offdiag"] == pytest.approx(dense_toeplitzness(e, exclude_diagonal=True), abs=1e-6)
        assert r["excess"] == pytest.approx((r["toeplitzness"] - r["null_mean"]) / (1 - r["null_mean"]), abs=1e-9)
        assert 0 < r["null_mean"] < 1
    # the planted trend: more sinusoidal later, so the off-diagonal R² rises
    off = [r["toeplitzness_offdiag"] for r in rows]
    assert off[-1] > off[0] + 0.3


def test_null_mean_matches_permutations(multiberts):
    """The null mean of a row equals the mean R² over sampled row permutations (a loose, independent check)."""
    repo = next(iter(multiberts))
    res = cli("trajectory", repo, "--format", "json", "--no-cache", "--null-draws", "2")
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)[0]
    e = multiberts[repo]
    rng = np.random.default_rng(0)
    draws = [dense_r2((p := e[rng.permutation(N)]) @ p.T) for _ in range(400)]
    assert row["null_mean"] == pytest.approx(np.mean(draws), abs=4 * np.std(draws) / np.sqrt(400) + 1e-3)


def test_figure_and_text_outputs(multiberts, tmp_path):
    import matplotlib.image

    png, csv = tmp_path / "t.png", tmp_path / "t.csv"
    res = cli("trajectory", *multiberts, "-o", str(csv), "--plot", str(png), "--no-cache", "--null-draws", "2", "--dpi", "50")
    assert res.exit_code == 0, res.output
    image = matplotlib.image.imread(png)
    assert image.shape[:2] == (220, 550)  # 11 x 4.4 inches at 50 dpi
    header = csv.read_text().splitlines()[0].split(",")
    for field in ("model", "series", "step", "toeplitzness", "toeplitzness_offdiag", "null_mean", "excess", "excess_offdiag"):
        assert field in header
    from posviz.plots.trajectory import PANELS, plot_trajectory

    rows = json.loads(cli("trajectory", *multiberts, "--format", "json", "--no-cache", "--null-draws", "2").stdout)
    fig = plot_trajectory(rows, band=True)
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == [p[3] for p in PANELS]
    assert "off-diagonal" in labels[0] and "full" in labels[1]


def test_run_folder_rows_and_last_equals_toeplitzness(absolute_run):
    res = cli("trajectory", str(absolute_run), "--format", "json", "--no-cache")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    kept = sorted(int(p.name.split("-")[1]) for p in absolute_run.glob("checkpoint-*"))
    assert [r["step"] for r in rows] == kept
    last = cli("toeplitzness", str(absolute_run / f"checkpoint-{kept[-1]}"), "--format", "json", "--no-cache")
    assert last.exit_code == 0, last.output
    expected = json.loads(last.stdout)[0]
    for key in ("toeplitzness", "toeplitzness_offdiag", "null_mean", "null_std", "excess", "excess_offdiag", "positions"):
        assert rows[-1][key] == expected[key], key


def test_the_library_function_gives_the_command_rows(absolute_run):
    import posviz

    res = cli("trajectory", str(absolute_run), "--format", "json", "--no-cache")
    result = posviz.trajectory(str(absolute_run), cache=False)
    assert result.measure == "toeplitzness" and result.cache_hits == 0 and not result.missing
    assert json.loads(res.stdout) == json.loads(json.dumps(result.rows))
    frame = result.to_frame()
    assert list(frame.step) == [r["step"] for r in result.rows] and "toeplitzness_offdiag" in frame
    with pytest.raises(posviz.PosvizError, match="unknown measure 'entropy'"):
        posviz.trajectory(str(absolute_run), measure="entropy")


def test_checkpoint_folders_take_their_step(absolute_run):
    given = [str(absolute_run / "checkpoint-12"), str(absolute_run / "checkpoint-6")]
    res = cli("trajectory", *given, "--format", "json", "--no-cache", "--null-draws", "0")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["step"] for r in rows] == [6, 12]
    assert {r["series"] for r in rows} == {str(absolute_run)}
    whole = json.loads(cli("trajectory", str(absolute_run), "--format", "json", "--no-cache", "--null-draws", "0").stdout)
    assert [r["toeplitzness_offdiag"] for r in rows] == [r["toeplitzness_offdiag"] for r in whole]


def _fails(res, *fragments: str):
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, res.output
    for f in fragments:
        assert f in lines[0], res.output


def test_missing_offline_names_every_id(multiberts, tmp_path):
    out = tmp_path / "rows.json"
    absent = ["google/multiberts-seed_1-step_20k", "google/multiberts-seed_1-step_40k"]
    res = cli("trajectory", *multiberts, *absent, "-o", str(out), "--no-cache")
    _fails(res, *absent)
    assert not out.exists()


def test_ids_without_step(multiberts, tmp_path):
    out = tmp_path / "rows.json"
    _fails(cli("trajectory", "google/multiberts-seed_0", "-o", str(out)), "no step", "google/multiberts-seed_0")
    _fails(cli("trajectory", *multiberts, "--steps", "1,2", "-o", str(out)), "--steps")
    assert not out.exists()


def test_steps_option(multiberts):
    ids = list(multiberts)
    res = cli("trajectory", ids[0], ids[1], "--steps", "5,3", "--format", "json", "--no-cache", "--null-draws", "2")
    assert res.exit_code == 0, res.output
    assert [r["step"] for r in json.loads(res.stdout)] == [3, 5]


def test_run_folder_without_checkpoint(absolute_run, tmp_path):
    run = tmp_path / "empty-run"
    run.mkdir()
    shutil.copy(absolute_run / "run.json", run / "run.json")
    out = tmp_path / "t.png"
    _fails(cli("trajectory", str(run), "--plot", str(out)), "no checkpoint")
    assert not out.exists()


def test_mixed_position_counts_refused(hf_cache, tmp_path):
    for step, n in (("20k", N), ("40k", N + 8)):
        folder = build_tiny_checkpoint("bert", tmp_path / step, safe_serialization=False, hidden_size=D,
                                       num_attention_heads=2, intermediate_size=16, max_position_embeddings=n)
        hf_cache(f"org/mix-step_{step}", folder)
    out = tmp_path / "rows.csv"
    _fails(cli("trajectory", "org/mix-step_20k", "org/mix-step_40k", "-o", str(out), "--no-cache"),
           "org/mix", "different position counts")
    assert not out.exists()


def test_series_band_over_seeds():
    from posviz.series.points import series_band

    rows = [{"series": s, "step": t, "toeplitzness": v} for s, t, v in
            [("a", 0, 0.1), ("b", 0, 0.3), ("a", 10, 0.5), ("b", 10, 0.7), ("a", 20, 0.9)]]
    band = series_band(rows, "toeplitzness")
    assert [b[0] for b in band] == [0, 10]
    assert band[0][1] == pytest.approx(0.2) and band[0][2] == pytest.approx(np.std([0.1, 0.3], ddof=1))


# ---- --revisions: one repo, its revisions named by step ------------------------------------------

#: Revisions of ``org/series`` as given (out of order, every naming rule) -> (step, weight of the sinusoid).
REVISIONS = {"step_200k": (200000, 0.7), "step_0k": (0, 0.1), "step-2000000": (2000000, 0.9), "20k": (20000, 0.4)}


def _revision_folders(tmp_path) -> dict[str, tuple]:
    return {rev: _planted(tmp_path / f"rev-{rev}", i, w) for i, (rev, (_, w)) in enumerate(REVISIONS.items())}


def _check_revision_rows(rows: list[dict], planted: dict[str, tuple]) -> None:
    """Rows sorted by step, one series named after the repo, values equal to a dense computation."""
    by_step = sorted(REVISIONS, key=lambda r: REVISIONS[r][0])
    assert [r["step"] for r in rows] == [0, 20000, 200000, 2000000]
    assert {r["series"] for r in rows} == {"org/series"}
    assert [r["model"] for r in rows] == [f"org/series@{rev}" for rev in by_step]
    for r, rev in zip(rows, by_step, strict=True):
        e = planted[rev][1]
        assert r["toeplitzness"] == pytest.approx(dense_toeplitzness(e), abs=1e-6)
        assert r["toeplitzness_offdiag"] == pytest.approx(dense_toeplitzness(e, exclude_diagonal=True), abs=1e-6)
    assert len({r["revision"] for r in rows}) == 4  # four commits


@pytest.fixture
def revision_cache(hf_cache, tmp_path) -> dict[str, tuple]:
    """``org/series`` in an offline HF cache, one ``refs/<revision>`` per checkpoint (no ``main``)."""
    planted = _revision_folders(tmp_path)
    for rev, (folder, _) in planted.items():
        hf_cache("org/series", folder, revision=rev)
    return planted


def test_revisions_offline_from_hf_cache_refs(revision_cache):
    res = cli("trajectory", "org/series", "--revisions", ",".join(REVISIONS), "--format", "json", "--no-cache",
              "--null-draws", "2")
    assert res.exit_code == 0, res.output
    _check_revision_rows(json.loads(res.stdout), revision_cache)


def test_revisions_from_the_hub_emulator_then_the_score_cache(fake_hub, tmp_path, monkeypatch):
    planted = _revision_folders(tmp_path)
    commits = {rev: fake_hub.add("org/series", folder, revision=rev) for rev, (folder, _) in planted.items()}
    args = ("trajectory", "org/series", "--revisions", ",".join(REVISIONS), "--format", "json", "--null-draws", "2")
    first = cli(*args)
    assert first.exit_code == 0, first.output
    rows = json.loads(first.stdout)
    _check_revision_rows(rows, planted)
    assert {r["revision"] for r in rows} == set(commits.values())
    assert {"pytorch_model.bin", "config.json"} <= {r.path.rsplit("/", 1)[-1] for r in fake_hub.requests}
    # again, offline: every score from the posviz score cache, the same numbers
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub.reset()
    again = cli(*args)
    assert again.exit_code == 0, again.output
    assert "4 of 4 scores read from the posviz score cache" in again.stderr
    assert [r["toeplitzness_offdiag"] for r in json.loads(again.stdout)] == [r["toeplitzness_offdiag"] for r in rows]
    assert fake_hub.requests == []


def test_revision_missing_on_the_hub_is_named(fake_hub, tmp_path):
    folder, _ = _planted(tmp_path / "one", 0, 0.5)
    fake_hub.add("org/series", folder, revision="step_20k")
    out = tmp_path / "rows.csv"
    _fails(cli("trajectory", "org/series", "--revisions", "step_20k,step_40k", "-o", str(out)),
           "org/series@step_40k", "revision not found")
    assert not out.exists()


def test_revisions_missing_offline_named_nothing_written(revision_cache, tmp_path):
    out = tmp_path / "rows.json"
    absent = ["step_40k", "step_80k"]
    res = cli("trajectory", "org/series", "--revisions", ",".join([*REVISIONS, *absent]), "-o", str(out), "--no-cache")
    _fails(res, *(f"org/series@{rev}" for rev in absent))
    assert not any(f"org/series@{rev}" in res.output for rev in REVISIONS)
    assert not out.exists()


def test_revisions_without_step_need_steps(revision_cache, tmp_path):
    out = tmp_path / "rows.json"
    _fails(cli("trajectory", "org/series", "--revisions", "main,dev", "-o", str(out)), "no step", "main, dev")
    _fails(cli("trajectory", "org/series", "--revisions", "step_0k,20k", "--steps", "1", "-o", str(out)), "--steps", "2 revision")
    _fails(cli("trajectory", "org/series", "--revisions", "step_20k,20000", "-o", str(out)), "both step 20000")
    _fails(cli("trajectory", "org/series", "org/other", "--revisions", "step_0k", "-o", str(out)), "one hub id")
    _fails(cli("trajectory", "org/series@step_0k", "--revisions", "step_0k", "-o", str(out)), "without @revision")
    _fails(cli("trajectory", "org/series", "--revisions", "step_0k,,20k", "-o", str(out)), "--revisions")
    assert not out.exists()
    # --steps names them, in order, whatever the names say
    res = cli("trajectory", "org/series", "--revisions", "step_0k,20k", "--steps", "7,3", "--format", "json",
              "--no-cache", "--null-draws", "0")
    assert res.exit_code == 0, res.output
    assert [(r["model"], r["step"]) for r in json.loads(res.stdout)] == [("org/series@20k", 3), ("org/series@step_0k", 7)]


# ---- RUN@STEP ----------------------------------------------------------------------------------

def test_run_at_step_is_one_row(absolute_run):
    whole = json.loads(cli("trajectory", str(absolute_run), "--format", "json", "--no-cache", "--null-draws", "2").stdout)
    res = cli("trajectory", f"{absolute_run}@6", "--format", "json", "--no-cache", "--null-draws", "2")
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)
    assert (row["series"], row["step"]) == (str(absolute_run), 6)
    assert row == next(r for r in whole if r["step"] == 6)
    # RUN and RUN@STEP together: each checkpoint once
    both = cli("trajectory", str(absolute_run), f"{absolute_run}@12", "--format", "json", "--no-cache", "--null-draws", "0")
    assert both.exit_code == 0, both.output
    assert [r["step"] for r in json.loads(both.stdout)] == [6, 12]


def test_run_at_step_not_kept(absolute_run, tmp_path):
    out = tmp_path / "rows.json"
    _fails(cli("trajectory", f"{absolute_run}@7", "-o", str(out)), f"{absolute_run}@7", "kept steps: 6, 12")
    assert not out.exists()

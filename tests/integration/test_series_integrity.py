"""``posviz trajectory`` checks its series: planted duplicates, a shard served under another step's label, a step
whose content is out of order, through the Hub emulator, the offline cache and a run folder with a re-saved checkpoint."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from tests.checkpoint_factory import build_tiny_checkpoint

N, D = 24, 8
EP = "embeddings.position_embeddings.weight"
REVS = [f"step_{k}k" for k in range(1, 9)]


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _path(t: float) -> np.ndarray:
    """E_P at training time ``t`` on a straight path (a genuine series: each step between its neighbours)."""
    rng = np.random.default_rng(0)
    start, drift = rng.normal(size=(N, D)), rng.normal(size=(N, D))
    return (start + t / 6 * drift).astype(np.float32)


def _bert(folder, seed: int, e: np.ndarray, **kw):
    return build_tiny_checkpoint("bert", folder, seed=seed, hidden_size=D, num_attention_heads=2, intermediate_size=16,
                                 max_position_embeddings=N, plant={EP: e}, **kw)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, object]:
    """Folders of the planted series, by revision (``step_2k`` is planted on the Hub, by :meth:`serve_as`).

    step_1k … step_8k follow one path, except: step_4k holds step_1k's E_P in a different file (other weights);
    step_7k holds the E_P of t = 40, far past the series (a label out of order with its content).
    """
    root = tmp_path_factory.mktemp("planted")
    content = {1: _path(1), 3: _path(3), 4: _path(1), 5: _path(5), 6: _path(6), 7: _path(40), 8: _path(8)}
    return {f"step_{k}k": _bert(root / f"step_{k}k", k, e) for k, e in content.items()}


def _rows(res) -> dict[str, dict]:
    assert res.exit_code == 0, res.output
    return {r["model"].rsplit("@", 1)[-1]: r for r in json.loads(res.stdout)}


def _check_flags(rows: dict[str, dict]) -> None:
    dup = {rev: r["duplicate_of"] for rev, r in rows.items() if r["duplicate_of"] is not None}
    assert dup == {"step_1k": "step_4k", "step_4k": "step_1k", "step_2k": "step_6k", "step_6k": "step_2k"}
    assert "same model.safetensors as step_6k" in rows["step_2k"]["reason"]
    assert "byte for byte" in rows["step_4k"]["reason"] and "different file" in rows["step_4k"]["reason"]
    assert [rev for rev, r in rows.items() if r["suspect"]] == ["step_7k"]
    assert "farther from both neighbours" in rows["step_7k"]["reason"]
    r7 = rows["step_7k"]
    assert min(r7["distance_prev"], r7["distance_next"]) > 3 * r7["distance_neighbours"]
    assert rows["step_5k"]["suspect"] is False and rows["step_5k"]["reason"] is None
    assert rows["step_3k"]["distance_prev"] is None  # the first trusted checkpoint has one neighbour: not tested


@pytest.fixture
def planted_hub(fake_hub, planted):
    for rev in REVS:
        if rev != "step_2k":
            fake_hub.add("org/series", planted[rev], revision=rev)
    fake_hub.serve_as("org/series", "step_2k", "step_6k")  # a branch serving another's bytes
    return fake_hub


def test_hub_series_flags_and_reads_identical_files_once(planted_hub, tmp_path, monkeypatch):
    fake_hub = planted_hub
    fake_hub.cdn = True  # as the Hub serves LFS files: the content hash rides on the redirect
    res = cli("trajectory", "org/series", "--revisions", ",".join(REVS), "--format", "json", "--no-cache", "--null-draws", "1")
    rows = _rows(res)
    _check_flags(rows)
    assert "4 of 8 checkpoints repeat another: step_1k = step_4k, step_2k = step_6k" in res.output
    assert "1 of 8 checkpoints break from both neighbours (suspect): step_7k" in res.output
    # Identical files are read once: the two commits serving one blob together fetch what one file costs.
    sha = {rev: fake_hub.repos["org/series"][rev]["sha"] for rev in REVS}
    spans = {rev: [r.span for r in fake_hub.requests if r.method == "GET" and r.span and r.filename == "model.safetensors"
                   and f"/{sha[rev]}/" in r.path] for rev in REVS}
    assert spans["step_1k"] and sorted(spans["step_2k"] + spans["step_6k"]) == sorted(spans["step_1k"])
    assert fake_hub.file_bytes("org/series", "model.safetensors") == 7 * sum(b - a for a, b in spans["step_1k"])
    assert not [r for r in fake_hub.requests if r.method == "HEAD" and r.filename == "model.safetensors"]
    # Offline, from the slice store and the Hugging Face cache: the same verdicts, no request.
    fake_hub.reset()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = _rows(cli("trajectory", "org/series", "--revisions", ",".join(REVS), "--format", "json", "--no-cache",
                      "--null-draws", "1"))
    _check_flags(again)
    assert fake_hub.requests == []
    assert [again[rev]["toeplitzness"] for rev in REVS] == [rows[rev]["toeplitzness"] for rev in REVS]


def test_table_csv_and_figure_mark_them(planted_hub, tmp_path):
    out = [tmp_path / "rows.csv", tmp_path / "table.txt", tmp_path / "t.png"]
    args = ["trajectory", "org/series", "--revisions", ",".join(REVS), "--no-cache", "--null-draws", "1"]
    res = cli(*args, *(x for p in out for x in ("-o", str(p))))
    assert res.exit_code == 0, res.output
    csv = out[0].read_text().splitlines()
    assert {"duplicate_of", "suspect", "reason"} <= set(csv[0].split(","))
    table = out[1].read_text()
    assert "check" in table and "= step_6k" in table and "suspect" in table
    assert out[2].stat().st_size > 0
    kept = cli(*args, "--keep-duplicates", "--plot", str(tmp_path / "kept.png"), "--format", "json")
    assert kept.exit_code == 0, kept.output
    assert sum(r["duplicate_of"] is not None for r in json.loads(kept.stdout)) == 4  # still marked in rows


def test_first_shard_served_under_another_label(fake_hub, tmp_path):
    folders = {k: _bert(tmp_path / f"s{k}", k, _path(k), max_shard_size="8KB") for k in range(1, 6)}
    index = json.loads((folders[1] / "model.safetensors.index.json").read_text())["weight_map"]
    shard = next(f for n, f in index.items() if n.endswith(EP))
    assert len(set(index.values())) > 1
    for k, folder in folders.items():
        fake_hub.add("org/sharded", folder, revision=f"step{k}000")
    fake_hub.serve_as("org/sharded", "step3000", "step5000", files=[shard])  # only the shard holding E_P
    res = cli("trajectory", "org/sharded", "--revisions", "step1000,step2000,step3000,step4000,step5000",
              "--format", "json", "--no-cache", "--null-draws", "0")
    rows = _rows(res)
    assert {rev: r["duplicate_of"] for rev, r in rows.items() if r["duplicate_of"]} == \
        {"step3000": "step5000", "step5000": "step3000"}
    assert f"same {shard} as step5000" in rows["step3000"]["reason"]
    assert not any(r["suspect"] for r in rows.values())


def test_offline_hf_cache_series(hf_cache, planted, tmp_path):
    """Whole files in the Hugging Face cache: the blob names are the content hashes."""
    for rev in REVS:
        hf_cache("org/cached", planted["step_6k" if rev == "step_2k" else rev], revision=rev,
                 commit=f"{REVS.index(rev) + 1:040x}")
    rows = _rows(cli("trajectory", "org/cached", "--revisions", ",".join(REVS), "--format", "json", "--no-cache",
                     "--null-draws", "1"))
    _check_flags(rows)


def test_multiberts_style_ids_json(hf_cache, planted):
    ids = {f"org/mb-seed_0-step_{k}k": planted[f"step_{k}k"] for k in (1, 3, 4, 5)}
    for repo, folder in ids.items():
        hf_cache(repo, folder)
    rows = json.loads(cli("trajectory", *ids, "--format", "json", "--no-cache", "--null-draws", "0").stdout)
    assert [(r["step"], r["duplicate_of"], r["suspect"]) for r in rows] == [
        (1000, "org/mb-seed_0-step_4k", False), (3000, None, False), (4000, "org/mb-seed_0-step_1k", False),
        (5000, None, False)]


def test_run_folder_with_resaved_and_copied_checkpoints(absolute_run, tmp_path):
    from safetensors.numpy import load_file, save_file

    from posviz.read.manifests import write_manifest

    run = tmp_path / "run"
    shutil.copytree(absolute_run, run)
    resaved = run / "checkpoint-18"  # checkpoint-6's weights saved again: other bytes, same tensors
    shutil.copytree(run / "checkpoint-6", resaved)
    (resaved / "posviz-manifest.json").unlink()
    weights = resaved / "model.safetensors"
    save_file(load_file(weights), weights, metadata={"format": "pt", "saved": "again"})
    write_manifest(resaved)
    shutil.copytree(run / "checkpoint-12", run / "checkpoint-24")  # an exact copy, manifest and all
    res = cli("trajectory", str(run), "--format", "json", "--no-cache", "--null-draws", "0")
    assert res.exit_code == 0, res.output
    rows = {r["step"]: r for r in json.loads(res.stdout)}
    assert {s: r["duplicate_of"] for s, r in rows.items()} == \
        {6: f"{run}@18", 12: f"{run}@24", 18: f"{run}@6", 24: f"{run}@12"}
    assert "byte for byte" in rows[18]["reason"] and "same model.safetensors" in rows[24]["reason"]


def test_measure_bands_marks_every_head(fake_hub, tmp_path):
    """A RoPE series: what is traced is layer 0's query/key projections."""
    for k in (1, 2, 4):
        wq = np.random.default_rng(k).normal(size=(32, 32)).astype(np.float32)
        folder = build_tiny_checkpoint("llama", tmp_path / f"l{k}", seed=k, plant={"layers.0.self_attn.q_proj.weight": wq})
        fake_hub.add("org/rope", folder, revision=f"step{k}000")
    fake_hub.serve_as("org/rope", "step3000", "step1000")
    revs = "step1000,step2000,step3000,step4000"
    res = cli("trajectory", "org/rope", "--revisions", revs, "--probe", "token:3", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    marks = {(r["step"], r["duplicate_of"]) for r in rows}
    assert marks == {(1000, "step3000"), (2000, None), (3000, "step1000"), (4000, None)}
    assert len(rows) == 16 and "2 of 4 checkpoints repeat another: step1000 = step3000, step3000 = step1000" in res.output
    table = cli("trajectory", "org/rope", "--revisions", revs, "--probe", "token:3")
    assert table.exit_code == 0 and "= step3000" in table.stdout


def test_measure_attention_marks_a_copied_checkpoint(absolute_run, train_corpus, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(absolute_run, run)
    shutil.copytree(run / "checkpoint-12", run / "checkpoint-24")
    res = cli("trajectory", str(run), "--measure", "attention", "--corpus", str(train_corpus), "--seq-len", "16",
              "--max-blocks", "2", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [(r["step"], r["duplicate_of"]) for r in rows] == [(6, None), (12, f"{run}@24"), (24, f"{run}@12")]


def test_later_ranges_go_straight_to_the_cdn(fake_hub, tmp_path, monkeypatch):
    """The Hub redirects the first range of an LFS file; later ones go to that address, and back through the Hub
    if it was refused (an expired signed address)."""
    from posviz.read.embeddings import load_position_embeddings

    tables = {name: np.random.default_rng(i).normal(size=(2048, D)).astype(np.float32) for i, name in enumerate(("one", "two"))}
    for name, e in tables.items():  # E_P of 64 KiB: past the first request's 32 KiB
        fake_hub.add(f"org/{name}", build_tiny_checkpoint("bert", tmp_path / name, hidden_size=D, num_attention_heads=2,
                                                          intermediate_size=16, max_position_embeddings=2048, plant={EP: e}))
    fake_hub.cdn = True
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)  # the Hub's credentials never go to the CDN host
    pe = load_position_embeddings("org/one")
    weights = [r for r in fake_hub.requests if r.filename == "model.safetensors"]
    assert [(r.status, r.path.startswith("/cdn/"), r.authorized) for r in weights] == \
        [(302, False, True), (206, True, False), (206, True, False)]  # the header (redirected), the rest of E_P
    fake_hub.faults.expire_cdn = True
    again = load_position_embeddings("org/two")
    statuses = [r.status for r in fake_hub.requests if r.filename == "model.safetensors" and r.repo_id == "org/two"]
    assert statuses == [302, 206, 403, 302, 206]  # the reused address had expired: the rest came through the Hub
    np.testing.assert_array_equal(pe.matrix, tables["one"].astype(np.float64))
    np.testing.assert_array_equal(again.matrix, tables["two"].astype(np.float64))


def test_tensors_read_again_when_not_held(hf_cache, planted):
    """Past the holding budget the traced tensors are read again, three at a time: the same verdicts."""
    from posviz.series.integrity import Trace, fingerprints, judge
    from posviz.series.points import revision_points

    for i, rev in enumerate(REVS):
        hf_cache("org/again", planted["step_6k" if rev == "step_2k" else rev], revision=rev, commit=f"{i + 1:040x}")
    points = revision_points(["org/again"], REVS)
    trace = Trace("positions")
    held = judge(fingerprints(points, trace, keep=lambda n: True))
    fps = fingerprints(points, trace, keep=lambda n: False)
    assert all(fp.vector is None and fp.traced for fp in fps)
    again = judge(fps, trace=trace)
    assert [v.fields() for v in again] == [v.fields() for v in held]
    assert [p.spec.rsplit("@")[-1] for p, v in zip(points, again, strict=True) if v.suspect] == ["step_7k"]


def test_config_is_one_request_into_the_hf_cache(fake_hub, planted):
    """The model info names the commit: config.json is one GET, laid out in the HF cache as huggingface_hub does."""
    import os

    from huggingface_hub import try_to_load_from_cache

    from posviz.read.sources import hf_cache_dir, resolve_source

    commit = fake_hub.add("org/cfg", planted["step_1k"], revision="step_1k")
    source = resolve_source("org/cfg@step_1k")
    config = [(r.method, r.status) for r in fake_hub.requests if r.filename == "config.json"]
    assert config == [("GET", 200)]
    assert source.revision == commit and source.config["model_type"] == "bert"
    cached = try_to_load_from_cache("org/cfg", "config.json", cache_dir=hf_cache_dir(), revision="step_1k")
    assert cached is not None and os.path.realpath(cached).endswith(fake_hub.repos["org/cfg"]["step_1k"]["etags"]["config.json"])
    assert (planted["step_1k"] / "config.json").read_bytes() == open(cached, "rb").read()

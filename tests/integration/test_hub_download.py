"""Hub downloads through the real huggingface_hub code, against a local fake Hub."""

from __future__ import annotations

import json

import numpy as np
import pytest

from posviz.errors import SourceError
from posviz.read.embeddings import load_position_embeddings


@pytest.fixture
def hub(fake_hub):
    return fake_hub


def test_sharded_model_downloads_only_the_needed_shard(hub, tiny_checkpoints, monkeypatch):
    folder = tiny_checkpoints("bert", max_shard_size="20KB")
    commit = hub.add("org/sharded-bert", folder)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    needed = index["weight_map"]["embeddings.position_embeddings.weight"]
    assert len(set(index["weight_map"].values())) > 2

    pe = load_position_embeddings("org/sharded-bert")
    np.testing.assert_array_equal(pe.matrix, load_position_embeddings(str(folder)).matrix)
    assert pe.revision == commit
    assert sorted(set(hub.downloads("org/sharded-bert"))) == sorted(["config.json", "model.safetensors.index.json", needed])

    # Second time: from the cache, with the network forbidden.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = load_position_embeddings("org/sharded-bert")
    np.testing.assert_array_equal(again.matrix, pe.matrix)
    assert again.revision == commit


def test_single_file_model(hub, tiny_checkpoints):
    folder = tiny_checkpoints("gpt2")
    hub.add("org/tiny-gpt2", folder)
    pe = load_position_embeddings("org/tiny-gpt2")
    assert pe.family == "gpt2" and pe.n == 40
    assert sorted(set(hub.downloads("org/tiny-gpt2"))) == ["config.json", "model.safetensors"]


def test_unknown_and_gated_repos(hub):
    with pytest.raises(SourceError, match="does not exist on the Hugging Face Hub"):
        load_position_embeddings("org/nope")
    hub.gated.add("org/gated")
    with pytest.raises(SourceError, match="gated"):
        load_position_embeddings("org/gated")

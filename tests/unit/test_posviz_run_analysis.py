"""Analysis of saved RoPE and sinusoidal posviz models: the RoPE band code and the computed E_P.

Band energies and frequencies are checked against a direct computation from the saved weights, and the probe
profile against the model's own torch modules (its embedding path and its rotary embedding).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posviz.models import PosvizAlbertConfig, PosvizForCausalLM, PosvizForMaskedLM
from posviz.schemes.modules.rope import apply_rotary

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=61, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_hidden_groups=2,
            num_attention_heads=4, intermediate_size=48, max_position_embeddings=20)
BASE, FRACTION, HEAD_DIM, ROT = 500.0, 0.5, 8, 4


def save(tmp_path, scheme: str, causal: bool = False, **kw):
    torch.manual_seed(0)
    cfg = PosvizAlbertConfig(**{**TINY, "position_scheme": scheme, "initializer_range": 0.2, **kw})
    model = (PosvizForCausalLM if causal else PosvizForMaskedLM)(cfg).eval()
    model.save_pretrained(tmp_path)
    return model


@pytest.fixture
def rope_model(tmp_path):
    return save(tmp_path, "rope", rope_theta=BASE, partial_rotary_factor=FRACTION), tmp_path


def direct_band_energy(model, layer: int) -> np.ndarray:
    """E[h, b] = ||W_Q rows b, b + d_rot/2 of head h|| * ||W_K the same rows||, from the weights of the layer's group."""
    group = layer // 2  # 4 layers in 2 groups
    att = model.albert.encoder.albert_layer_groups[group].albert_layers[0].attention
    wq = att.query.weight.detach().double().numpy().reshape(4, HEAD_DIM, -1)
    wk = att.key.weight.detach().double().numpy().reshape(4, HEAD_DIM, -1)
    half = ROT // 2
    return np.array([[np.linalg.norm(wq[h, [b, b + half]]) * np.linalg.norm(wk[h, [b, b + half]]) for b in range(half)]
                     for h in range(4)])


def model_probe_logits(model, layer: int, n: int) -> np.ndarray:
    """The probe's position-only logits through the model's own modules: the mean first-layer input over the
    vocabulary (no positions), the layer's q/k, rotated by the model's rotary embedding, at every (i, j)."""
    emb, enc = model.albert.embeddings, model.albert.encoder
    att = enc.albert_layer_groups[layer // 2].albert_layers[0].attention
    with torch.no_grad():
        x = enc.embedding_hidden_mapping_in(emb.LayerNorm(emb.word_embeddings.weight + emb.token_type_embeddings.weight[0]))
        mu = x.double().mean(0)
        q = (mu @ att.query.weight.double().T + att.query.bias.double()).view(4, HEAD_DIM)
        k = (mu @ att.key.weight.double().T + att.key.bias.double()).view(4, HEAD_DIM)
        cos, sin = (t.double() for t in enc.rotary_emb(n))
        qr = apply_rotary(q[:, None].expand(4, n, HEAD_DIM), cos, sin)
        kr = apply_rotary(k[:, None].expand(4, n, HEAD_DIM), cos, sin)
        return (qr @ kr.transpose(1, 2) / np.sqrt(HEAD_DIM)).numpy()


def test_a_rope_run_goes_through_the_rope_band_code(rope_model):
    from posviz.extract.registry import convention_line, open_heads

    model, folder = rope_model
    heads = open_heads(str(folder), positions="0:16")
    assert (heads.num_layers, heads.num_heads, heads.n) == (4, 4, 16)
    for layer in (0, 3):
        conv = heads.conventions(layer)
        assert (conv["rope_theta"], conv["rotary_dim"], conv["head_dim"], conv["pairing"]) == (BASE, ROT, HEAD_DIM, "half")
        np.testing.assert_allclose(conv["band_frequency"], BASE ** (-2 * np.arange(ROT // 2) / ROT), rtol=1e-15)
        np.testing.assert_allclose(conv["per_head"]["band_energy"], direct_band_energy(model, layer), rtol=1e-6)
        assert conv["causal"] is False  # a masked-LM run attends both ways
        np.testing.assert_allclose(heads.layer(layer).to_dense(), model_probe_logits(model, layer, 16), rtol=1e-5, atol=1e-7)
    assert "embedding_hidden_mapping_in" in heads.conventions(0)["probe_input"]
    assert "4 of 8 dims rotated" in convention_line(heads.conventions(0))
    free = open_heads(str(folder), positions="0:16", probe="none")  # --probe is a RoPE option: accepted here
    assert free.conventions(0)["probe"] == "content-free"


def test_the_layout_of_a_rope_run_maps_layers_to_their_group():
    from posviz.read.rope_layouts import rope_layout

    cfg = PosvizAlbertConfig(**TINY, position_scheme="rope").to_dict()
    layout = rope_layout(cfg)
    assert [layout.name(layout.query, layer) for layer in range(4)] == [
        f"encoder.albert_layer_groups.{g}.albert_layers.0.attention.query" for g in (0, 0, 1, 1)]
    assert layout.input_norm is None and layout.pairing == "half"


def test_a_causal_rope_run_says_so(tmp_path):
    from posviz.extract.registry import open_heads

    save(tmp_path, "rope", causal=True)
    assert open_heads(str(tmp_path), positions="0:8").conventions(1)["causal"] is True


def test_causal_runs_of_other_schemes_say_so_in_their_conventions(tmp_path):
    from posviz.extract.registry import convention_line, open_heads

    save(tmp_path, "alibi", causal=True)
    conv = open_heads(str(tmp_path)).conventions(0)
    assert conv["causal"] is True and "causal (k = j - i > 0 masked)" in convention_line(conv)


def test_a_sinusoidal_run_has_the_formula_as_its_e_p(tmp_path):
    from posviz.read.embeddings import load_position_embeddings
    from posviz.toeplitz import toeplitzness

    save(tmp_path, "sinusoidal")
    pe = load_position_embeddings(str(tmp_path), positions="2:18")
    pos = np.arange(20)[:, None]
    freq = 10000.0 ** (-np.arange(0, 16, 2) / 16)
    want = np.empty((20, 16))
    want[:, 0::2], want[:, 1::2] = np.sin(pos * freq), np.cos(pos * freq)
    scale = pe.config["sinusoidal_scale"]  # what the model multiplies its table by, recorded in config.json
    assert scale == pytest.approx(np.sqrt(2) * pe.config["initializer_range"])
    np.testing.assert_allclose(pe.matrix, scale * want[2:18], rtol=0, atol=1e-15)
    assert (pe.fixed, pe.positions, pe.stored_rows, pe.family) == ("sinusoidal", (2, 18), 20, "posviz-albert (sinusoidal)")
    assert "computed from config.json" in pe.tensor
    assert toeplitzness(pe.matrix @ pe.matrix.T) == pytest.approx(1.0, abs=1e-12)

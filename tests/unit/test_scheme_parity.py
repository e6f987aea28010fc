"""One implementation per scheme: the numpy math (posviz.schemes), the torch builders
(posviz.schemes.modules) and transformers' own code agree."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from posviz.extract.absolute import AbsoluteHeads  # noqa: E402
from posviz.positional_scores import PositionalScores  # noqa: E402
from posviz.schemes import alibi, rope, t5  # noqa: E402
from posviz.schemes.absolute import LN_MODES, layer_norm  # noqa: E402
from posviz.schemes.modules import AlibiScores, T5Scores, TupeScores  # noqa: E402
from posviz.schemes.modules.offsets import expand_offsets  # noqa: E402
from posviz.schemes.offsets import offset_axis, offset_index  # noqa: E402
from tests.reference import assert_close  # noqa: E402

BUCKETS = [(8, 16), (16, 20), (32, 128), (32, 50), (64, 256), (128, 1000), (10, 64), (6, 8)]


# ---- offsets ------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_offset_expansion_is_the_same_in_numpy_torch_and_positional_scores(n):
    f = np.random.default_rng(n).normal(size=(3, 2 * n - 1))
    want = PositionalScores.from_offsets(f).to_dense()
    np.testing.assert_array_equal(f[:, offset_index(n)], want)
    np.testing.assert_array_equal(expand_offsets(torch.from_numpy(f)).numpy(), want)
    assert offset_axis(n)[n - 1] == 0 and offset_axis(n)[0] == 1 - n


# ---- T5 -----------------------------------------------------------------------------
@pytest.mark.parametrize(("num_buckets", "max_distance"), BUCKETS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_equal_transformers_bucket_for_bucket(num_buckets, max_distance, bidirectional):
    from transformers.models.t5.modeling_t5 import T5Attention

    k = np.arange(-4 * max_distance - 50, 4 * max_distance + 50)
    want = T5Attention._relative_position_bucket(
        torch.from_numpy(k), bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    ).numpy()
    got = t5.relative_position_bucket(k, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    pos = np.arange(40)  # any shape: a (query, key) grid
    grid = t5.relative_position_bucket(pos[None, :] - pos[:, None], bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    np.testing.assert_array_equal(grid, want[k.searchsorted(pos[None, :] - pos[:, None])])


@pytest.mark.parametrize(("num_buckets", "max_distance"), BUCKETS[:4])
def test_t5_builder_and_analysis_give_the_same_bias(num_buckets, max_distance):
    torch.manual_seed(0)
    m = T5Scores(3, max_positions=70, num_buckets=num_buckets, max_distance=max_distance).double()
    np.testing.assert_array_equal(m.offset_buckets.numpy(), t5.offset_buckets(70, num_buckets=num_buckets, max_distance=max_distance))
    w = m.relative_attention_bias.weight.detach().numpy()  # (num_buckets, heads), as in a T5 checkpoint
    for n in (1, 33, 70):
        analysis = t5.bias_offsets(w, n, bidirectional=True, num_buckets=num_buckets, max_distance=max_distance)
        with torch.no_grad():
            np.testing.assert_array_equal(m.offsets(n).numpy(), analysis)
            np.testing.assert_array_equal(m(n).numpy(), PositionalScores.from_offsets(analysis).to_dense())


def test_tupe_r_buckets_are_the_numpy_t5_buckets_with_cls_untied():
    ids = TupeScores.make_bucket_ids(50, 16, 40).numpy()
    pos = np.arange(50)
    np.testing.assert_array_equal(ids[1:, 1:], t5.relative_position_bucket(pos[None, :] - pos[:, None], num_buckets=16, max_distance=40)[1:, 1:])
    m = TupeScores(16, 2, max_positions=50, relative=True, num_buckets=16, max_distance=40)
    np.testing.assert_array_equal(m.bucket_ids.numpy(), ids)
    assert TupeScores(16, 2, max_positions=50).derived_buffers() == {}


# ---- ALiBi --------------------------------------------------------------------------
def test_alibi_slopes_equal_bloom_for_every_head_count():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    for heads in range(1, 65):
        hf = build_alibi_tensor(torch.ones(1, 2), heads, torch.float32)[:, 0, 1].numpy()  # slope_h * position 1
        ours = alibi.slopes(heads)
        # transformers raises a float32 base to powers up to 2H: a few float32 ulps of error
        assert_close(ours, hf, rtol=2e-6)
        # the builder's buffer is exactly the numpy slopes rounded to its dtype
        np.testing.assert_array_equal(AlibiScores(heads).slopes.numpy(), ours.astype(np.float32))


@pytest.mark.parametrize("bias_max", [8.0, 4.0, 16.0])
def test_mpt_slopes_equal_transformers(bias_max):
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    for heads in (1, 2, 3, 6, 8, 12, 16, 24, 32):
        hf = build_mpt_alibi_tensor(heads, 2, bias_max)[:, 0, 0].double().numpy()  # slope_h * (0 - 1)
        np.testing.assert_allclose(alibi.slopes(heads, kind="mpt", alibi_bias_max=bias_max), -hf, rtol=3e-7)


@pytest.mark.parametrize("heads", [4, 6, 12])
def test_alibi_builder_and_analysis_give_the_same_bias(heads):
    m = AlibiScores(heads).double()
    n = 25
    analysis = alibi.bias_offsets(m.slopes.numpy(), n)
    np.testing.assert_array_equal(m.offsets(n).numpy(), analysis)
    np.testing.assert_array_equal(m(n).numpy(), PositionalScores.from_offsets(analysis).to_dense())
    assert_close(analysis, alibi.bias_offsets(alibi.slopes(heads), n), rtol=1e-7)  # float32 buffer


# ---- RoPE ---------------------------------------------------------------------------
LLAMA = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
             max_position_embeddings=256, vocab_size=64, bos_token_id=0, eos_token_id=0)
SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    "yarn-untruncated": {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 64, "truncate": False,
                         "beta_fast": 16, "beta_slow": 2},
    "yarn-mscale": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 0.7, "mscale_all_dim": 1.0},
    "yarn-attention": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "attention_factor": 1.3},
    "longrope": {"rope_type": "longrope", "short_factor": list(np.linspace(1.0, 2.5, 8)), "long_factor": [3.0] * 8,
                 "original_max_position_embeddings": 64},
    "proportional": {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0},
}


# posviz follows transformers 5's formulas. transformers 4.x computes YaRN with max_position_embeddings as the
# original length (ignoring mscale, mscale_all_dim and truncate), reads LongRoPE's original length only at the
# top level of the config, and has no "proportional": those cases are checked on transformers 5 only.
TRANSFORMERS_5_ONLY = {"yarn", "yarn-untruncated", "yarn-mscale", "yarn-attention", "longrope", "proportional"}
BEFORE_5 = int(transformers.__version__.split(".")[0]) < 5


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.skipif(BEFORE_5 and name in TRANSFORMERS_5_ONLY, reason="transformers 4.x formula differs"))
    for name in SCALINGS
])
def test_rope_frequencies_equal_transformers_rope_init_functions(name):
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = dict(SCALINGS[name])
    cfg = AutoConfig.for_model("llama", **LLAMA, rope_theta=20000.0, rope_scaling=scaling)
    spec = rope.rope_spec(cfg.to_dict())
    inv, factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](cfg, None)
    assert spec.rope_type == scaling["rope_type"] and spec.theta == 20000.0
    np.testing.assert_allclose(spec.inv_freq, inv.double().numpy(), rtol=2e-6, atol=1e-30)  # transformers: float32
    assert spec.attention_factor == pytest.approx(factor, rel=1e-12)


def test_rope_default_frequencies_equal_the_rotary_embedding_of_llama_and_gpt_neox():
    from transformers import AutoConfig

    from tests.checkpoint_factory import rotary_inv_freq

    cfg = AutoConfig.for_model("llama", **LLAMA, rope_theta=500000.0)
    np.testing.assert_allclose(rope.rope_spec(cfg.to_dict()).inv_freq, rotary_inv_freq(cfg), rtol=1e-6)
    cfg = AutoConfig.for_model("gpt_neox", hidden_size=64, num_attention_heads=4, num_hidden_layers=1, intermediate_size=64,
                               vocab_size=64, rotary_pct=0.5, bos_token_id=0, eos_token_id=0)
    spec = rope.rope_spec(cfg.to_dict())
    assert spec.rotary_dim == 8
    np.testing.assert_allclose(spec.inv_freq, rotary_inv_freq(cfg), rtol=1e-6)


def test_an_unknown_rope_type_is_refused():
    from posviz.errors import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match="unknown rope_type 'spiral'"):
        rope.rope_spec({**LLAMA, "rope_scaling": {"rope_type": "spiral"}})


# ---- LayerNorm modes (absolute tables) ------------------------------------------------
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_equals_torch(affine):
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(7, 24))
    gamma, beta = (rng.normal(size=24), rng.normal(size=24)) if affine else (None, None)
    want = torch.nn.functional.layer_norm(
        torch.from_numpy(x), (24,), None if gamma is None else torch.from_numpy(gamma), None if beta is None else torch.from_numpy(beta), eps=1e-6
    ).numpy()
    np.testing.assert_allclose(layer_norm(x, gamma, beta, 1e-6), want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("ln", LN_MODES)
def test_absolute_builder_and_analysis_give_the_same_position_only_logits(tmp_path, ln):
    """An ALBERT checkpoint through extract.AbsoluteHeads equals the posviz model with its weights."""
    from transformers import AlbertConfig, AlbertModel

    from posviz.models import PosvizAlbertConfig, PosvizModel, positional_scores

    torch.manual_seed(0)
    hf_cfg = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_hidden_groups=2,
                          num_attention_heads=4, intermediate_size=32, max_position_embeddings=30)
    hf = AlbertModel(hf_cfg, add_pooling_layer=False)
    hf.save_pretrained(tmp_path)
    ours = PosvizModel(PosvizAlbertConfig.from_albert(hf_cfg))
    ours.load_state_dict(hf.state_dict())
    heads = AbsoluteHeads(str(tmp_path), ln=ln)
    for layer in (0, 1):
        want = positional_scores(ours, layer=layer, convention=ln).to_dense()
        got = heads.layer(layer).to_dense()
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * np.abs(want).max())


# ---- the analysis does not import torch ---------------------------------------------------
@pytest.mark.parametrize("model_type", ["bert", "t5", "bloom", "llama"])
def test_analysis_of_safetensors_checkpoints_imports_no_torch(tiny_checkpoints, model_type):
    folder = tiny_checkpoints(model_type)
    code = (
        "import sys\n"
        "import posviz.schemes.absolute, posviz.schemes.alibi, posviz.schemes.rope, posviz.schemes.t5\n"
        "from posviz.extract.registry import convention_line, open_heads\n"
        f"heads = open_heads({str(folder)!r}, positions='0:16' if {model_type!r} != 'bert' else None)\n"
        "heads.score(heads.num_layers - 1)\n"
        "print(convention_line(heads.conventions(0)))\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()

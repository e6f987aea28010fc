"""RoPE per head from the weights: band decomposition, band energy and probe profiles against transformers.

Each architecture is a real tiny model (random weights with non-trivial norm gains and
biases, saved with ``save_pretrained``). Its eager attention probabilities are the
reference: posviz reads the saved tensors, rebuilds q and k and the logits through its
band decomposition, and must give the same log-probabilities (rotate-half vs
interleaved pairs, partial rotary, GQA, fused projections, biases, QK norms, logit
scales, rope scaling).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import CONFIG_MAPPING, AutoConfig, AutoModel  # noqa: E402

from posviz.errors import OptionError, UnsupportedModelError  # noqa: E402
from posviz.extract.registry import open_heads  # noqa: E402
from posviz.extract.rope_weights import read_layer  # noqa: E402
from posviz.read.checkpoints import Checkpoint  # noqa: E402
from posviz.read.rope_layouts import rope_layout  # noqa: E402
from posviz.read.sources import resolve_source  # noqa: E402
from posviz.schemes import rope, rope_bands  # noqa: E402
from tests.checkpoint_factory import rotary_inv_freq  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

N = 12
_BASE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64, vocab_size=64, bos_token_id=0, eos_token_id=0, pad_token_id=0)
TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5
CONFIGS = {
    "llama": _BASE,
    "qwen2": _BASE,  # q/k biases
    "qwen3": {**_BASE, "head_dim": 8},  # per-head QK RMSNorm
    "olmo2": _BASE,  # QK RMSNorm over all heads, no norm in front of attention
    "gemma2": {**_BASE, "head_dim": 8, "query_pre_attn_scalar": 16, "attn_logit_softcapping": None,
               "final_logit_softcapping": None, "sliding_window": 64},
    "gemma3_text": {**_BASE, "head_dim": 8, "query_pre_attn_scalar": 16, "sliding_window": 64,
                    "layer_types": ["sliding_attention", "full_attention"]},
    "phi": {**_BASE, "partial_rotary_factor": 0.5},  # LayerNorm, biases, partial rotary
    "phi3": {**_BASE, "original_max_position_embeddings": 64},  # fused [Q; K; V]
    "gpt_neox": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, rotary_pct=0.5,
                     max_position_embeddings=64, vocab_size=64, bos_token_id=0, eos_token_id=0),  # fused per head
    "gptj": dict(n_embd=32, n_head=4, n_layer=2, rotary_dim=4, n_positions=64, vocab_size=64, bos_token_id=0,
                 eos_token_id=0),  # interleaved pairs
}


def _needs(model_type: str):
    return pytest.mark.skipif(model_type not in CONFIG_MAPPING,
                              reason=f"transformers {transformers.__version__} lacks model type {model_type}")


def build(model_type: str, folder, **overrides):
    """A tiny model with random weights of visible size (norm gains around 1), saved to ``folder``."""
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, **{**CONFIGS.get(model_type, _BASE), **overrides})
    model = AutoModel.from_config(config, attn_implementation="eager")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            is_norm = "norm" in name or ".ln_" in name
            p.copy_((1 + 0.3 * noise if name.endswith("weight") else 0.3 * noise) if is_norm else 0.3 * noise)
    model.save_pretrained(folder)
    return model.eval()


def hf_attention(model, layer: int, **inputs):
    """Layer ``layer``'s attention probabilities ``(heads, n, n)`` and the hidden states entering it."""
    seen = {}

    def grab(module, args, kwargs):
        seen["x"] = (args[0] if args else kwargs["hidden_states"])[0].double().numpy()

    layers = next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList))
    handle = layers[layer].register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            out = model(**inputs, output_attentions=True)
    finally:
        handle.remove()
    return out.attentions[layer][0].double().numpy(), seen["x"]


def causal_log_softmax(logits: np.ndarray) -> np.ndarray:
    n = logits.shape[-1]
    masked = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
    top = masked.max(-1, keepdims=True)
    return masked - top - np.log(np.exp(masked - top).sum(-1, keepdims=True))


def assert_same_attention(probs: np.ndarray, logits: np.ndarray) -> None:
    """transformers' probabilities vs the softmax of posviz's logits, on the keys each query sees."""
    mine = causal_log_softmax(logits)
    keep = np.broadcast_to(np.tril(np.ones(probs.shape[-2:], bool)), probs.shape)
    theirs = np.log(np.maximum(probs, 1e-300))
    tol = 2e-4 * max(1.0, float(np.abs(logits).max()))
    np.testing.assert_allclose(theirs[keep], mine[keep], atol=tol)


def posviz_logits(folder, config: dict, layer: int, x: np.ndarray) -> np.ndarray:
    """Logits of layer inputs ``x`` through posviz's weights reader and band decomposition."""
    source = resolve_source(str(folder))
    heads, spec = source.config.get("num_attention_heads") or source.config["n_head"], rope.rope_spec(source.config, layer)
    weights = read_layer(Checkpoint(source), rope_layout(source.config), source.config, layer, heads, spec.head_dim)
    q, k = weights.project(x)
    scale = float(config["query_pre_attn_scalar"]) ** -0.5 if "query_pre_attn_scalar" in config else spec.head_dim**-0.5
    return rope_bands.band_logits(q, k, spec.inv_freq, rotary_dim=spec.rotary_dim, pairing=rope_layout(source.config).pairing,
                                  scale=scale, attention_factor=spec.attention_factor)


@pytest.mark.parametrize("model_type", [pytest.param(t, marks=_needs(t)) for t in CONFIGS])
def test_band_decomposition_reproduces_transformers_attention(model_type, tmp_path):
    model = build(model_type, tmp_path / model_type)
    embeds = torch.from_numpy(np.random.default_rng(0).normal(size=(1, N, 32))).float()
    for layer in (0, 1):
        probs, x = hf_attention(model, layer, inputs_embeds=embeds)
        assert_same_attention(probs, posviz_logits(tmp_path / model_type, CONFIGS[model_type], layer, x))


SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
}


@pytest.mark.parametrize("kind", [
    pytest.param(k, marks=pytest.mark.skipif(k == "yarn" and not TRANSFORMERS_5,
                                             reason="transformers 4.x's YaRN differs (docs/heads.md)"))
    for k in SCALINGS])
def test_rope_scaling_bands_match_transformers(kind, tmp_path):
    """Scaled frequencies per band (and YaRN's attention factor) as transformers' rotary code applies them."""
    key = "rope_parameters" if TRANSFORMERS_5 else "rope_scaling"
    model = build("llama", tmp_path / kind, **{key: {**SCALINGS[kind], "rope_theta": 10000.0}})
    config = model.config.to_dict()
    np.testing.assert_allclose(rope.rope_spec(config).inv_freq, rotary_inv_freq(model.config), rtol=1e-6)
    embeds = torch.from_numpy(np.random.default_rng(1).normal(size=(1, N, 32))).float()
    probs, x = hf_attention(model, 0, inputs_embeds=embeds)
    assert_same_attention(probs, posviz_logits(tmp_path / kind, config, 0, x))


@pytest.mark.parametrize("model_type", ["llama", "gpt_neox", "gptj",
                                        pytest.param("gemma3_text", marks=_needs("gemma3_text"))])
def test_token_probe_profile_is_the_models_position_only_attention(model_type, tmp_path):
    """A repeated token: transformers' attention is the softmax of f_h(j - i), head by head."""
    model = build(model_type, tmp_path / model_type)
    probs, _ = hf_attention(model, 0, input_ids=torch.full((1, N), 5))
    heads = open_heads(str(tmp_path / model_type), positions=f"0:{N}", probe="token:5")
    stack = heads.layer(0)
    logits = np.stack([stack.matrix(h) for h in range(stack.heads)])
    assert_same_attention(probs, logits)
    assert not np.allclose(stack.offsets[0], stack.offsets[1])  # different per head


def test_mean_probe_is_the_mean_normalised_embedding(tmp_path):
    """Default probe: transformers fed mean_v norm(e_v) at every position (a hook on its input norm)."""
    model = build("gpt_neox", tmp_path / "neox")
    layer = model.layers[1]
    with torch.no_grad():
        mu = layer.input_layernorm(model.embed_in.weight).mean(0)
    handle = layer.input_layernorm.register_forward_hook(lambda m, a, out: mu.expand_as(out))
    try:
        probs, _ = hf_attention(model, 1, inputs_embeds=torch.zeros(1, N, 32))
    finally:
        handle.remove()
    heads = open_heads(str(tmp_path / "neox"), positions=f"0:{N}")
    stack = heads.layer(1)
    assert_same_attention(probs, np.stack([stack.matrix(h) for h in range(stack.heads)]))
    assert heads.conventions(1)["probe"] == "mean"


@pytest.mark.parametrize("model_type,rotate", [("llama", "rotate_half"), ("gptj", "rotate_every_two")])
def test_band_energy_is_invariant_under_the_models_own_rotation(model_type, rotate, tmp_path):
    """Rotating every query/key row by transformers' own rotate function leaves each band's energy unchanged.

    This holds only if posviz pairs the dimensions as the model rotates them.
    """
    import importlib

    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    build(model_type, tmp_path / model_type)
    source = resolve_source(str(tmp_path / model_type))
    spec, layout = rope.rope_spec(source.config), rope_layout(source.config)
    w = read_layer(Checkpoint(source), layout, source.config, 0, 4, spec.head_dim)
    wq, wk = w.effective()
    before = rope_bands.band_energy(wq, wk, spec.rotary_dim, layout.pairing)
    angle = 3.0 * spec.inv_freq
    per_dim = np.repeat(angle, 2) if layout.pairing == "interleaved" else np.concatenate([angle, angle])

    def turn(m):  # (heads, d, D): rotate the rotary dims of every column as the model rotates a query
        t = torch.from_numpy(np.ascontiguousarray(np.swapaxes(m[:, : spec.rotary_dim], 1, 2)))
        cos, sin = torch.from_numpy(np.cos(per_dim)), torch.from_numpy(np.sin(per_dim))
        out = m.copy()
        turned = getattr(module, rotate)(t[None])[0]  # GPT-J's function wants 4-D (batch, seq, heads, dims)
        out[:, : spec.rotary_dim] = np.swapaxes((t * cos + turned * sin).numpy(), 1, 2)
        return out

    after = rope_bands.band_energy(turn(wq), turn(wk), spec.rotary_dim, layout.pairing)
    np.testing.assert_allclose(after, before, rtol=1e-10)
    wrong = "half" if layout.pairing == "interleaved" else "interleaved"
    assert not np.allclose(rope_bands.band_energy(turn(wq), turn(wk), spec.rotary_dim, wrong),
                           rope_bands.band_energy(wq, wk, spec.rotary_dim, wrong), rtol=1e-3)


def test_band_energy_of_planted_weights_and_gqa():
    """Planted weights: head h's energy in band b is |W_Q,h,b| * |W_K,g(h),b| with g(h) = h // 2."""
    wq, wk = np.zeros((4, 8, 3)), np.zeros((2, 8, 3))
    wq[:, 1, 0] = [1.0, 2.0, 3.0, 4.0]  # band 1 (rotate-half: dims 1 and 5)
    wq[:, 5, 1] = 1.0
    wk[0, 1, 0], wk[1, 5, 2] = 2.0, 3.0
    e = rope_bands.band_energy(wq, wk, 8, "half")
    np.testing.assert_allclose(e[:, 1], np.sqrt(np.array([1.0, 4.0, 9.0, 16.0]) + 1) * np.array([2.0, 2.0, 3.0, 3.0]))
    assert np.all(e[:, [0, 2, 3]] == 0)
    s = rope_bands.summarize_bands(e)
    assert list(s.dominant) == [1, 1, 1, 1] and np.allclose(s.high_share, 1.0)  # band 1 of 4: the high half is bands 0-1
    np.testing.assert_allclose(rope_bands.high_frequency_weights(5), [1, 1, 0.5, 0, 0])


def test_profile_summaries_of_a_known_profile():
    n = 10
    k = np.arange(-(n - 1), n)
    f = np.where(k == -1, 5.0, 0.0)[None]  # a previous-token head
    s = rope_bands.summarize_profiles(f)
    assert s.peak_offset[0] == -1 and s.locality[0] == 1
    assert s.weight_prev[0] == pytest.approx(np.exp(5) / (np.exp(5) + n - 1))
    wide = np.exp(-(k / 3.0) ** 2)[None]  # a Gaussian of half width 3 sqrt(ln 2) around 0, on top of a 0 floor
    s = rope_bands.summarize_profiles(wide)
    g = wide[0, :n] - wide[0, :n].mean()
    assert s.peak_offset[0] == 0 and s.locality[0] == int(np.sum(g >= g[-1] / 2))


def test_probe_options_and_unknown_layouts(tmp_path):
    build("llama", tmp_path / "llama")
    with pytest.raises(OptionError, match="--probe"):
        open_heads(str(tmp_path / "llama"), probe="tokens:3")
    with pytest.raises(OptionError, match="outside the vocabulary"):
        open_heads(str(tmp_path / "llama"), probe="token:999").layer(0)
    kernel = open_heads(str(tmp_path / "llama"), probe="content-free", positions="0:8").layer(0)
    np.testing.assert_allclose(kernel.offsets[0], rope.kernel_offsets(rope.rope_spec(kernel.meta).inv_freq, 8))
    with pytest.raises(UnsupportedModelError, match="model_type 'falcon'.*"):
        rope_layout({"model_type": "falcon"})
    with pytest.raises(UnsupportedModelError, match="qk_layernorm"):
        rope_layout({"model_type": "phi", "qk_layernorm": True})


def _word_tokenizer(folder) -> dict[str, int]:
    """A word-level tokenizer over 20 words, saved beside the model (ids 0-19, inside the tiny vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate("[UNK] the a cat dog sat on mat ran far and is was big small red blue old new sun".split())}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(str(folder))
    return vocab


@pytest.mark.parametrize("probe", ["token:cat sat", "corpus"])
def test_text_and_corpus_probes_use_the_models_tokenizer(probe, tmp_path):
    """token:TEXT and corpus:FILE: transformers fed mean_t norm(e_t) over the text's tokens."""
    model = build("llama", tmp_path / "llama")
    vocab = _word_tokenizer(tmp_path / "llama")
    text = "cat sat" if probe.startswith("token") else "the cat sat on the mat\nthe dog ran far\n"
    if probe == "corpus":
        (tmp_path / "corpus.txt").write_text(text, encoding="utf-8")
        probe = f"corpus:{tmp_path / 'corpus.txt'}"
    ids = [vocab[w] for w in text.split()]
    norm = model.layers[0].input_layernorm
    with torch.no_grad():
        mu = norm(model.embed_tokens.weight[ids]).mean(0)
    handle = norm.register_forward_hook(lambda m, a, out: mu.expand_as(out))
    try:
        probs, _ = hf_attention(model, 0, inputs_embeds=torch.zeros(1, N, 32))
    finally:
        handle.remove()
    stack = open_heads(str(tmp_path / "llama"), positions=f"0:{N}", probe=probe).layer(0)
    assert_same_attention(probs, np.stack([stack.matrix(h) for h in range(stack.heads)]))
    assert stack.meta["probe"] == probe


@pytest.mark.parametrize("model_type", ["llama", pytest.param("olmo2", marks=_needs("olmo2")),
                                        pytest.param("qwen3", marks=_needs("qwen3"))])
def test_row_norm_shortcut_equals_the_effective_weights(model_type, tmp_path):
    """Band energy from row norms (what posviz heads uses) equals the one from the built effective weights."""
    build(model_type, tmp_path / model_type)
    source = resolve_source(str(tmp_path / model_type))
    spec, layout = rope.rope_spec(source.config), rope_layout(source.config)
    w = read_layer(Checkpoint(source), layout, source.config, 1, 4, spec.head_dim)
    np.testing.assert_allclose(rope_bands.band_energy_from_rows(*w.effective_row_norms(), spec.rotary_dim, "half"),
                               rope_bands.band_energy(*w.effective(), spec.rotary_dim, "half"), rtol=1e-12)


# ---- beyond the trained context (Liu et al., ICLR 2024) ---------------------------------------------------


def test_critical_dimension_of_llama2_is_92():
    """Liu et al.'s worked example: LLaMA-2, d = 128, T = 4096, base 10000 gives d_extra = 92."""
    assert rope.critical_dimension(128, 10000.0, 4096) == 92
    assert rope.critical_dimension(8, 10000.0, 5) == 0  # T < 2π: no dimension turns fully (clipped at 0)
    assert rope.critical_dimension(8, 10.0, 10**9) == 8  # every dimension turns: clipped at d


@pytest.mark.parametrize("rotary_dim,base,context", [(128, 10000.0, 4096), (128, 500000.0, 8192), (64, 10000.0, 2048),
                                                    (32, 1000.0, 100), (8, 10000.0, 64), (96, 1e6, 32768)])
def test_unscaled_boundary_band_is_half_the_critical_dimension(rotary_dim, base, context):
    """Counted band by band from the wavelengths 2π·base^(2b/d), the bands that turn fully within T are d_extra / 2."""
    wavelength = [2 * np.pi * base ** (2 * b / rotary_dim) for b in range(rotary_dim // 2)]  # independent of posviz
    inside = sum(w <= context for w in wavelength)
    beyond = rope_bands.beyond_context(2 * np.pi / rope.base_frequencies(base, rotary_dim), context)
    assert rope_bands.context_boundary(beyond) == inside == int(beyond.size - beyond.sum())
    assert rope.critical_dimension(rotary_dim, base, context) == 2 * inside


def test_beyond_context_share_of_known_energies():
    energy = np.array([[1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    beyond = np.array([False, False, True, True])
    np.testing.assert_allclose(rope_bands.beyond_context_share(energy, beyond), [0.5, 0.25, 0.0])
    assert rope_bands.context_boundary(np.zeros(4, bool)) is None
    assert rope_bands.beyond_context([6.3, np.inf], 64).tolist() == [False, True]  # a zero frequency never turns


@pytest.mark.parametrize("config,expected", [
    ({"max_position_embeddings": 4096}, (4096, "max_position_embeddings")),
    ({"n_positions": 2048}, (2048, "n_positions")),  # GPT-J
    ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                                         "original_max_position_embeddings": 8192}},
     (8192, "original_max_position_embeddings")),
    ({"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
      "rope_scaling": {"type": "longrope"}}, (4096, "original_max_position_embeddings")),  # Phi-3: top level
    ({"hidden_size": 32}, (None, None)),
])
def test_trained_context_from_the_config(config, expected):
    assert rope.trained_context(config) == expected

"""Per-head position-only logits of absolute models against Hugging Face's own modules.

Two independent references:

* module by module: E_P through the model's LayerNorm / mapping / query and key
  modules (``AlbertModel.embeddings.LayerNorm``, ``embedding_hidden_mapping_in``,
  the shared ``query``/``key``; GPT-2's fused ``c_attn`` split by HF's own
  ``split``; ...), with the module's own ``scaling`` (``tests.checkpoint_factory.attention_scaling``);
* end to end, layer 0: a checkpoint whose word (and token-type) embeddings are
  zero, run through the whole HF model with eager attention; its attention
  probabilities must equal the softmax of the position-only logits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import transformers  # noqa: E402
from transformers import AutoConfig, AutoModel  # noqa: E402

from posviz.errors import CheckpointError, OptionError, UnsupportedModelError  # noqa: E402
from posviz.extract.absolute import AbsoluteHeads  # noqa: E402
from posviz.extract.registry import open_heads  # noqa: E402
from tests.checkpoint_factory import TINY_CONFIGS, attention_scaling, build_tiny_checkpoint  # noqa: E402
from tests.reference import assert_close  # noqa: E402

EXTRA_CONFIGS = {
    "megatron-bert": TINY_CONFIGS["bert"],
    "roberta-prelayernorm": TINY_CONFIGS["roberta"],
    "xlm-roberta-xl": TINY_CONFIGS["roberta"],
    "mbart": TINY_CONFIGS["bart"],
}

WORD_EMBEDDINGS = {
    "gpt2": "wte.weight",
    "gpt_neo": "wte.weight",
    "opt": "embed_tokens.weight",
    "bart": "shared.weight",
    "mbart": "shared.weight",
}


def _build(model_type: str, folder: Path, *, zero: tuple[str, ...] = (), **overrides) -> Path:
    """Save a tiny random model (optionally with zeroed tables) with save_pretrained."""
    torch.manual_seed(1)
    cfg = AutoConfig.for_model(model_type, **{**TINY_CONFIGS.get(model_type, EXTRA_CONFIGS.get(model_type, {})), **overrides})
    model = AutoModel.from_config(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(name == z or name.endswith("." + z) for z in zero):
                p.zero_()
            elif name.endswith("bias") and p.abs().max() == 0:
                p.normal_(0, 0.5)  # HF initialises biases to zero; make them matter
            elif name.endswith("LayerNorm.weight") or name.endswith("layer_norm.weight") or "ln" in name.split(".")[-2]:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(folder)
    return folder


def _hf(folder: Path):
    return AutoModel.from_pretrained(folder, attn_implementation="eager").double().eval()


def _reference(model_type: str, model, layer: int, ln: str, bias: bool):
    """(q, k, scale) from HF modules: the position part of layer ``layer``'s input, projected."""
    cfg = model.config
    with torch.no_grad():
        if model_type in ("albert", "bert", "electra"):
            emb = model.embeddings
            x = emb.position_embeddings.weight
            if ln == "ln+type0":
                x = x + emb.token_type_embeddings.weight[0]
            if ln != "none":
                x = emb.LayerNorm(x)
            if model_type == "albert":
                x = model.encoder.embedding_hidden_mapping_in(x)
                group = int(layer / (cfg.num_hidden_layers / cfg.num_hidden_groups))
                att = model.encoder.albert_layer_groups[group].albert_layers[0].attention
            else:
                if model_type == "electra":
                    x = model.embeddings_project(x)
                att = model.encoder.layer[layer].attention.self
            q_mod, k_mod, scale = att.query, att.key, attention_scaling(att)
        elif model_type == "distilbert":
            x = model.embeddings.position_embeddings.weight
            x = model.embeddings.LayerNorm(x) if ln != "none" else x
            att = model.transformer.layer[layer].attention
            q_mod, k_mod, scale = att.q_lin, att.k_lin, attention_scaling(att)
        elif model_type in ("gpt2", "gpt_neo"):
            x = model.wpe.weight
            block = model.h[layer]
            x = block.ln_1(x) if ln != "none" else x
            if model_type == "gpt2":
                q, k, _ = block.attn.c_attn(x).split(cfg.n_embd, dim=2 if x.dim() == 3 else 1)
                if not bias:
                    b = block.attn.c_attn.bias
                    q, k = q - b[: cfg.n_embd], k - b[cfg.n_embd : 2 * cfg.n_embd]
                return q, k, attention_scaling(block.attn)
            att = block.attn.attention
            q_mod, k_mod, scale = att.q_proj, att.k_proj, 1.0  # GPT-Neo does not scale Q K^T
        elif model_type == "opt":
            x = model.decoder.embed_positions.weight[2:]
            lay = model.decoder.layers[layer]
            x = lay.self_attn_layer_norm(x) if ln != "none" else x
            q_mod, k_mod, scale = lay.self_attn.q_proj, lay.self_attn.k_proj, attention_scaling(lay.self_attn)
        elif model_type == "bart":
            side = model.encoder
            x = side.embed_positions.weight[2:]
            x = side.layernorm_embedding(x) if ln != "none" else x
            att = side.layers[layer].self_attn
            q_mod, k_mod, scale = att.q_proj, att.k_proj, attention_scaling(att)
        else:
            raise AssertionError(model_type)
        q, k = q_mod(x), k_mod(x)
        if not bias and q_mod.bias is not None:
            q, k = q - q_mod.bias, k - k_mod.bias
    return q, k, scale


def _maps(q, k, scale, heads: int) -> np.ndarray:
    n, d = q.shape
    dh = d // heads
    qh = q.reshape(n, heads, dh).permute(1, 0, 2)
    kh = k.reshape(n, heads, dh).permute(1, 0, 2)
    return (qh @ kh.transpose(1, 2) * scale).numpy()


CASES = [
    ("albert", 0, "ln", True),
    ("albert", 1, "ln+type0", True),
    ("albert", 1, "none", False),
    ("bert", 1, "ln", True),
    ("bert", 0, "ln+type0", False),
    ("electra", 1, "ln", True),
    ("distilbert", 1, "ln", True),
    ("gpt2", 0, "ln", True),
    ("gpt2", 1, "none", False),
    ("gpt_neo", 1, "ln", True),
    ("opt", 1, "ln", True),
    ("opt", 0, "ln", False),
    ("bart", 1, "ln", True),
]


@pytest.mark.parametrize("model_type,layer,ln,bias", CASES)
def test_every_head_equals_hf_modules(tmp_path, model_type, layer, ln, bias):
    folder = _build(model_type, tmp_path / model_type)
    model = _hf(folder)
    heads = AbsoluteHeads(str(folder), ln=ln, bias=bias)
    stack = heads.layer(layer)
    q, k, scale = _reference(model_type, model, layer, ln, bias)
    ref = _maps(q, k, scale, heads.num_heads)
    assert stack.heads == heads.num_heads and stack.n == ref.shape[1]
    for h in range(stack.heads):
        np.testing.assert_allclose(stack.matrix(h), ref[h], rtol=1e-6, atol=1e-9 * np.abs(ref).max())
    conv = heads.conventions(layer)
    assert conv["ln"] == ln and conv["bias"] == (bias and model_type != "gpt_neo")
    assert conv["scale"] == pytest.approx(scale)


def test_albert_groups_follow_hf_layer_order(tmp_path):
    """With 4 layers in 2 groups, each layer's map comes from the group HF actually runs."""
    folder = _build("albert", tmp_path / "albert", num_hidden_layers=4, num_hidden_groups=2)
    model = _hf(folder)
    calls: list[int] = []
    hooks = [
        group.albert_layers[0].attention.query.register_forward_hook(lambda *_, g=g: calls.append(g))
        for g, group in enumerate(model.encoder.albert_layer_groups)
    ]
    with torch.no_grad():
        model(torch.full((1, 8), 5))
    for hook in hooks:
        hook.remove()
    heads = AbsoluteHeads(str(folder))
    for layer, group in enumerate(calls):
        att = model.encoder.albert_layer_groups[group].albert_layers[0].attention
        with torch.no_grad():
            x = model.encoder.embedding_hidden_mapping_in(model.embeddings.LayerNorm(model.embeddings.position_embeddings.weight))
            ref = _maps(att.query(x), att.key(x), attention_scaling(att), 4)
        np.testing.assert_allclose(heads.layer(layer).to_dense(), ref, rtol=1e-6, atol=1e-12)
        assert f"albert_layer_groups.{group}." in heads.conventions(layer)["shared_layer"]
    assert calls == [0, 0, 1, 1]


E2E = ["bert", "albert", "electra", "distilbert", "roberta", "gpt2", "gpt_neo", "opt", "bart",
       "megatron-bert", "roberta-prelayernorm", "xlm-roberta-xl", "mbart"]


# transformers 4.x cannot run GPT-Neo and OPT in float64: its causal mask overflows (fixed in 5)
FLOAT64_CAUSAL_MASK_FAILS = {"gpt_neo", "opt"} if int(transformers.__version__.split(".")[0]) < 5 else set()


@pytest.mark.parametrize("model_type", [
    pytest.param(m, marks=pytest.mark.skipif(m in FLOAT64_CAUSAL_MASK_FAILS, reason="float64 causal mask of transformers 4.x"))
    for m in E2E
])
def test_layer0_softmax_equals_hf_attention_with_zero_word_embeddings(tmp_path, model_type):
    word = WORD_EMBEDDINGS.get(model_type, "word_embeddings.weight")
    zero = (word, "token_type_embeddings.weight")
    folder = _build(model_type, tmp_path / model_type, zero=zero)
    model = _hf(folder)
    heads = AbsoluteHeads(str(folder))
    logits = heads.layer(0).to_dense()
    n = logits.shape[1]
    ids = torch.full((1, n), 5)
    with torch.no_grad():
        if model_type in ("bart", "mbart"):
            out = model.encoder(input_ids=ids, output_attentions=True)
        else:
            out = model(input_ids=ids, output_attentions=True)
    probs = out.attentions[0][0].numpy()
    if model_type in ("gpt2", "gpt_neo", "opt"):
        logits = np.where(np.tri(n, dtype=bool), logits, -np.inf)
    expected = np.exp(logits - logits.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    # OPT's eager attention takes the softmax in float32 even for a float64 model
    np.testing.assert_allclose(probs, expected, atol=1e-7 if model_type == "opt" else 1e-10)


def test_ln_type0_adds_token_type_row0_end_to_end(tmp_path):
    folder = _build("bert", tmp_path / "bert", zero=("word_embeddings.weight",))
    model = _hf(folder)
    logits = AbsoluteHeads(str(folder), ln="ln+type0").layer(0).to_dense()
    with torch.no_grad():
        probs = model(input_ids=torch.full((1, logits.shape[1]), 5), output_attentions=True).attentions[0][0].numpy()
    expected = np.exp(logits - logits.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(probs, expected / expected.sum(axis=-1, keepdims=True), atol=1e-10)


def test_only_the_requested_layer_is_read(tmp_path):
    """A checkpoint stripped of layer 1's tensors still gives layer 0; layer 1 fails cleanly."""
    from safetensors.numpy import load_file, save_file

    folder = build_tiny_checkpoint("gpt2", tmp_path / "gpt2")
    sd = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in sd.items() if not k.startswith("h.1.")}, folder / "model.safetensors", metadata={"format": "pt"})
    heads = AbsoluteHeads(str(folder))
    assert heads.layer(0).heads == 4
    with pytest.raises(CheckpointError, match="h.1.attn.c_attn.weight"):
        heads.layer(1)


def test_bad_options_are_clear_errors(tiny_checkpoints):
    gpt2 = str(tiny_checkpoints("gpt2"))
    with pytest.raises(OptionError, match="no token-type embeddings"):
        AbsoluteHeads(gpt2, ln="ln+type0")
    with pytest.raises(OptionError, match="out of range: .* has 2 layers"):
        AbsoluteHeads(gpt2).layer(2)
    with pytest.raises(OptionError, match="--ln"):
        open_heads(gpt2, ln="batch")
    with pytest.raises(UnsupportedModelError, match="synthetic"):
        open_heads("sinusoidal:64x16")


def test_positions_and_rows_follow_the_family(tiny_checkpoints):
    heads = AbsoluteHeads(str(tiny_checkpoints("roberta")), positions="3:20")
    meta = heads.metadata()
    assert heads.n == 17 and meta["rows"] == [5, 22] and "precede position 0" in meta["rows_note"]
    full = AbsoluteHeads(str(tiny_checkpoints("roberta"))).layer(0).to_dense()
    assert_close(heads.layer(0).to_dense(), full[:, 3:20, 3:20], rtol=1e-12)

"""``posviz attention`` on real tiny models: planted heads, content-only heads, ALiBi, dense reference, CLI, bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.observe.attention import attention
from posviz.observe.statistics import support_mask
from posviz.toeplitz.diagonals import diagonal_sums_array as diagonal_sums
from tests.checkpoint_factory import save_tiny_model as _save

pytestmark = pytest.mark.usefixtures("one_thread")

N = 16


@pytest.fixture(scope="module")
def bert(tmp_path_factory, tokenizer) -> Path:
    return _save("bert", tmp_path_factory.mktemp("bert"), tokenizer=tokenizer, vocab_size=len(tokenizer))


def _planted_previous_token(sd) -> None:
    """Layer 0, head 0 of a tiny BERT attends exactly to k = -1 from positions alone.

    Token and type embeddings are zero; E_P[i] = (cos iθ, sin iθ, -cos iθ, -sin iθ, 0, ...) has zero
    mean and a constant norm, so the embedding LayerNorm only scales it (by 4). Head 0's query rotates
    it back by one step θ, its key keeps it: the logit α·16·cos((i - 1 - j)θ)/√8 peaks at j = i - 1.
    """
    import torch

    theta = math.pi / (N + 1)
    pos = torch.arange(sd["embeddings.position_embeddings.weight"].shape[0], dtype=torch.float32)
    table = torch.zeros_like(sd["embeddings.position_embeddings.weight"])
    table[:, 0], table[:, 1], table[:, 2], table[:, 3] = torch.cos(pos * theta), torch.sin(pos * theta), -torch.cos(pos * theta), -torch.sin(pos * theta)
    sd["embeddings.position_embeddings.weight"].copy_(table)
    sd["embeddings.word_embeddings.weight"].zero_()
    sd["embeddings.token_type_embeddings.weight"].zero_()
    alpha = 500.0
    q, k = sd["encoder.layer.0.attention.self.query.weight"], sd["encoder.layer.0.attention.self.key.weight"]
    q[:8].zero_(), k[:8].zero_()
    q[0, 0], q[0, 1], q[1, 0], q[1, 1] = alpha * math.cos(theta), alpha * math.sin(theta), -alpha * math.sin(theta), alpha * math.cos(theta)
    k[0, 0], k[1, 1] = 1.0, 1.0
    sd["encoder.layer.0.attention.self.query.bias"][:8].zero_()
    sd["encoder.layer.0.attention.self.key.bias"][:8].zero_()


def _direct(a: np.ndarray, mask: np.ndarray, blocks: np.ndarray | None = None) -> dict[str, float]:
    """R^2 of ``a`` over ``mask`` and the positional share of ``blocks`` (default: ``a`` alone), entry by entry."""
    n = a.shape[0]
    blocks = a[None] if blocks is None else blocks
    counts = diagonal_sums(mask.astype(float))
    with np.errstate(invalid="ignore"):
        f = diagonal_sums(np.where(mask, a, 0.0)) / counts
    k = np.arange(n)[None, :] - np.arange(n)[:, None] + n - 1
    x = a[mask]
    r2 = 1 - ((x - f[k][mask]) ** 2).sum() / ((x - x.mean()) ** 2).sum()
    xb = blocks[:, mask]
    share = 1 - ((xb - f[k][mask][None]) ** 2).sum() / ((xb - xb.mean()) ** 2).sum()
    return {"r2": r2, "share": share, "profile": f}


def test_planted_previous_token_head(tmp_path):
    folder = _save("bert", tmp_path / "planted", edit=_planted_previous_token)
    ids = np.random.default_rng(0).integers(5, 60, size=(6, N))
    r = attention(str(folder), token_blocks=ids, layers="0")
    rec = r.records()[0]
    assert not r.causal
    assert rec["profile_peak"] == -1 and rec["profile_at_peak"] == pytest.approx(1.0, abs=1e-6)
    assert rec["toeplitzness_offdiag"] == pytest.approx(1.0, abs=1e-6)
    ideal = np.eye(N, k=-1)
    ideal[0, 0] = 1.0  # query 0 has no previous token; cos((-1 - j)θ) is largest at j = 0
    np.testing.assert_allclose(r.means[0][0], ideal, atol=1e-6)
    expected = _direct(ideal, support_mask(N, False))
    assert rec["toeplitzness"] == pytest.approx(expected["r2"], abs=1e-5)
    assert rec["positional_share"] == pytest.approx(expected["share"], abs=1e-5)
    assert rec["positional_share"] > 0.93 and rec["positional_share_null"] < 0.05


def test_content_only_head_has_the_null_share(tmp_path):
    """Queries constant (W_Q = 0, a query bias), no positions: each block's rows are one distribution over keys
    that depends only on the key tokens, which are i.i.d. — nothing for an offset profile to explain."""

    def edit(sd):
        sd["embeddings.position_embeddings.weight"].zero_()
        sd["encoder.layer.0.attention.self.query.weight"].zero_()
        sd["encoder.layer.0.attention.self.query.bias"].normal_(0.0, 3.0)
        sd["encoder.layer.0.attention.self.key.weight"].mul_(4.0)

    folder = _save("bert", tmp_path / "content", edit=edit, seed=1)
    ids = np.random.default_rng(1).integers(0, 64, size=(96, N))
    rows = attention(str(folder), token_blocks=ids, layers="0", batch_size=32).records()
    for rec in rows:
        assert rec["positional_share"] < 0.05
        assert abs(rec["positional_share"] - rec["positional_share_null"]) < 0.02
        assert abs(rec["toeplitzness_offdiag"] - rec["null_mean_offdiag"]) < 0.15


def test_alibi_mean_attention_decays_by_the_slope(tmp_path):
    from posviz.schemes.alibi import slopes

    def edit(sd):  # content logits zero in layer 0: only ALiBi's bias is left
        sd["h.0.self_attention.query_key_value.weight"].zero_()
        sd["h.0.self_attention.query_key_value.bias"].zero_()

    folder = _save("bloom", tmp_path / "bloom", edit=edit)
    ids = np.random.default_rng(2).integers(1, 64, size=(4, N))
    r = attention(str(folder), token_blocks=ids, layers="0")
    assert r.causal
    m = slopes(4, kind="bloom")
    last = np.log(r.means[0][:, N - 1, :])  # the last query sees every key: log A = -m (i - j) - log Z
    np.testing.assert_allclose(np.diff(last, axis=1), np.repeat(m[:, None], N - 1, axis=1), rtol=1e-4)
    prof = r.stats[0].profiles[:, : N]  # k = -(N-1) .. 0
    assert (np.diff(prof, axis=1) > 0).all()  # mean attention decays with |k|
    assert (r.stats[0].profile_peak == 0).all()
    # Causal normalisation: A[i, i + k] = exp(m k) / Z_i, and Z_i grows with i until exp(-m i) is small, so the
    # steeper a head's slope, the sooner its rows stop depending on i and the more Toeplitz its mean attention.
    order = np.argsort(-m)
    assert (np.diff(r.stats[0].toeplitzness_offdiag[order]) < 0).all()


def _no_wpe(sd) -> None:  # NoPE: a GPT-2 whose position table is zero
    sd["wpe.weight"].zero_()


@pytest.mark.parametrize("model_type", ["gpt2", "bert", "t5", "gpt2-nope"])
def test_statistics_match_dense_output_attentions(tmp_path, model_type):
    import torch
    from transformers import AutoModel

    kind = model_type.removesuffix("-nope")
    folder = _save(kind, tmp_path / model_type, edit=_no_wpe if model_type.endswith("nope") else None)
    ids = np.random.default_rng(3).integers(1, 64, size=(5, N))
    r = attention(str(folder), token_blocks=ids, layers="all", batch_size=2)
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    model = model.get_encoder() if kind == "t5" else model
    with torch.no_grad():
        maps = model(input_ids=torch.as_tensor(ids), output_attentions=True).attentions
    causal = kind == "gpt2"
    assert r.causal == causal
    from posviz.observe.accumulate import _Capture

    capture, seen, running = _Capture(model), [], [False]
    hooks = [model.register_forward_pre_hook(lambda *_: running.__setitem__(0, True)),
             model.register_forward_hook(lambda *_: running.__setitem__(0, False))]
    capture.deliver = lambda layer, probs: seen.append((layer, tuple(probs.shape), running[0]))
    with torch.inference_mode():
        capture.run(torch.as_tensor(ids[:2]))
        capture.run(torch.as_tensor(ids[:2]))
    for h in hooks:
        h.remove()
    # every layer's maps, the first batch's included, are taken inside the forward pass (the short probe
    # that finds where they come from delivers nothing), so no batch holds all layers' maps
    heads = model.config.num_attention_heads if kind != "t5" else model.config.num_heads
    assert capture.sites and seen == [(layer, (2, heads, N, N), True) for _ in range(2) for layer in (0, 1)]
    mask = support_mask(N, causal)
    for layer in (0, 1):
        blocks = maps[layer].double().numpy()  # (B, H, n, n)
        np.testing.assert_allclose(r.means[layer], blocks.mean(axis=0), atol=1e-7)
        for h in range(blocks.shape[1]):
            d = _direct(blocks[:, h].mean(axis=0), mask, blocks[:, h])
            s = r.stats[layer]
            assert s.toeplitzness[h] == pytest.approx(d["r2"], abs=1e-6)
            assert s.positional_share[h] == pytest.approx(d["share"], abs=1e-6)
            np.testing.assert_allclose(s.profiles[h], d["profile"], atol=1e-7)


def test_device_map_auto_matches_plain_cpu(bert, corpus):
    pytest.importorskip("accelerate")
    a = attention(str(bert), corpus=str(corpus), seq_len=N, max_blocks=4, layers="all")
    b = attention(str(bert), corpus=str(corpus), seq_len=N, max_blocks=4, layers="all", device_map="auto")
    assert [x["toeplitzness"] for x in a.records()] == pytest.approx([x["toeplitzness"] for x in b.records()], abs=1e-9)


def test_cli_json_interface(bert, corpus, tmp_path):
    res = CliRunner().invoke(app, ["attention", str(bert), "--corpus", str(corpus), "--seq-len", str(N), "--layers", "0",
                                   "--format", "json", "--max-blocks", "8", "-o", str(tmp_path / "l.png"), "-o", str(tmp_path / "r.csv")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "l.png").stat().st_size > 10_000 and (tmp_path / "r.csv").read_text().startswith("model,layer,head,")
    proc = subprocess.run([sys.executable, "-m", "posviz", "attention", str(bert), "--corpus", str(corpus), "--seq-len", str(N),
                           "--layers", "0", "--format", "json", "--max-blocks", "8"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["layer"], r["head"]) for r in rows] == [(0, h) for h in range(4)]
    for r in rows:
        assert set(r) >= {"toeplitzness_offdiag", "toeplitzness", "positional_share", "profile_peak"}
        assert isinstance(r["profile_peak"], int) and abs(r["profile_peak"]) <= N // 2
        assert r["blocks"] == 8 and r["seq_len"] == N


def test_run_folder_and_eager_parity(absolute_run, train_corpus):
    """A posviz-trained run: its tokenizer, eager probabilities; eager and SDPA give the same encoder output."""
    import torch

    from posviz.models import PosvizForMaskedLM

    r = attention(str(absolute_run), corpus=str(train_corpus), seq_len=32, max_blocks=4, layers="all")
    assert len(r.layers) >= 2 and r.blocks == 4 and "[CLS] at position 0" in r.layout
    assert all(0.0 < x["sink_mass"] < 1.0 for x in r.records())
    ckpt = absolute_run / "checkpoint-12"
    ids = torch.as_tensor(np.random.default_rng(4).integers(5, 100, size=(2, 32)))
    outs = [PosvizForMaskedLM.from_pretrained(ckpt, attn_implementation=impl).eval()(ids).logits for impl in ("sdpa", "eager")]
    torch.testing.assert_close(outs[0], outs[1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case", ["empty corpus", "too long", "no such layer", "bad device map"])
def test_bad_input_one_line_exit_2(bert, corpus, tmp_path, case):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    args = {"empty corpus": ["--corpus", str(empty)], "too long": ["--corpus", str(corpus), "--seq-len", "41"],
            "no such layer": ["--corpus", str(corpus), "--layers", "0,5"],
            "bad device map": ["--corpus", str(corpus), "--device-map", "balanced"]}[case]
    out = tmp_path / "out.json"
    res = CliRunner().invoke(app, ["attention", str(bert), "--seq-len", str(N), *args, "-o", str(out)])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.output and not out.exists()


def test_model_without_attention_weights_fails_clearly(absolute_run):
    """An SDPA-only forward produces no probabilities: one clear error rather than wrong numbers."""
    from posviz.errors import UnsupportedModelError
    from posviz.models import PosvizModel
    from posviz.observe.accumulate import accumulate

    model = PosvizModel.from_pretrained(absolute_run / "checkpoint-12", attn_implementation="sdpa").eval()
    with pytest.raises(UnsupportedModelError, match="no attention weights"):
        accumulate(model, np.ones((2, 8), dtype=np.int64), [0])


def test_report_attention_section_is_opt_in(bert, corpus, tmp_path):
    import pypdf

    out = tmp_path / "r.pdf"
    res = CliRunner().invoke(app, ["report", str(bert), "--no-albert", "-o", str(out), "--attention-corpus", str(corpus),
                                   "--attention-seq-len", str(N), "--attention-max-blocks", "4", "--layers", "0"])
    assert res.exit_code == 0, res.output
    assert "attention" in res.stderr.split("sections:")[1]
    text = "".join(p.extract_text() for p in pypdf.PdfReader(out).pages)
    assert "Attention on text" in text and "4 blocks of 16 tokens" in text
    direct = attention(str(bert), corpus=str(corpus), seq_len=N, max_blocks=4, layers="0")
    if direct.method == "tiled":  # transformers 5: the page names the layer's sink rate and spans
        st = direct.stats[0]
        assert f"sink rate {100 * st.sink_rate():.0f} %" in text
        assert f"span 50 % / 90 %: {st.span50.mean():.1f} / {st.span90.mean():.1f} tokens" in text


def test_trajectory_measure_attention(absolute_run, train_corpus, tmp_path):
    res = CliRunner().invoke(app, ["trajectory", str(absolute_run), "--measure", "attention", "--corpus", str(train_corpus),
                                   "--seq-len", "32", "--max-blocks", "4", "--format", "json", "--plot", str(tmp_path / "t.png")])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["step"] for r in rows] == [6, 12] and {r["blocks"] for r in rows} == {4}
    assert (tmp_path / "t.png").stat().st_size > 10_000
    # the same blocks, one checkpoint at a time through the Python API
    direct = attention(f"{absolute_run}@12", corpus=str(train_corpus), seq_len=32, max_blocks=4, layers="all").records()
    assert rows[1]["toeplitzness_offdiag"] == pytest.approx(np.mean([r["toeplitzness_offdiag"] for r in direct]), abs=1e-12)
    assert rows[1]["positional_share"] == pytest.approx(np.mean([r["positional_share"] for r in direct]), abs=1e-12)
    if "span90" in direct[0]:  # the tiled path: spans, entropy and the sink rate along training too
        assert rows[1]["span90"] == pytest.approx(np.mean([r["span90"] for r in direct]), abs=1e-12)
        assert rows[1]["entropy_normalised"] == pytest.approx(np.mean([r["entropy_normalised"] for r in direct]), abs=1e-12)
        assert rows[1]["sink_rate"] == np.mean([r["sink"] for r in direct])
        table = CliRunner().invoke(app, ["trajectory", str(absolute_run), "--measure", "attention", "--corpus", str(train_corpus),
                                         "--seq-len", "32", "--max-blocks", "4"])
        assert "span90" in table.stdout and "sink rate" in table.stdout


def test_rope_band_norms(tmp_path):
    """Mean query/key norm per RoPE band (rotate-half pairs) against the projections applied by hand."""
    import torch
    from transformers import AutoModel

    folder = _save("llama", tmp_path / "llama", num_key_value_heads=2)
    ids = np.random.default_rng(5).integers(1, 64, size=(3, N))
    r = attention(str(folder), token_blocks=ids, layers="1")
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        hidden = model(input_ids=torch.as_tensor(ids), output_hidden_states=True).hidden_states[1]  # input of layer 1
        attn = model.layers[1].self_attn
        x = model.layers[1].input_layernorm(hidden).double()
        for which, proj, heads in (("query", attn.q_proj, 4), ("key", attn.k_proj, 2)):
            y = (x @ proj.weight.double().T).reshape(3, N, heads, 8)
            want = torch.sqrt(y[..., :4] ** 2 + y[..., 4:] ** 2).mean(dim=(0, 1)).numpy()
            np.testing.assert_allclose(r.rope_bands[1][which], want, rtol=1e-5)
    assert len(r.records()[0]["query_band_norms"]) == 4

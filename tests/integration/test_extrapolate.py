"""``posviz extrapolate`` on real tiny models: loss and attention statistics against direct computations, n/a lengths,
RoPE-scaling variants against transformers' own scaled models, posviz runs, the CLI and its JSON interface."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.extrapolation.extrapolate import extrapolate
from tests.checkpoint_factory import TINY_CONFIGS, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

L = 24  # a window length within every tiny table (40 positions; LLaMA declares 64)


def _save_lm(model_type: str, folder: Path, tokenizer, *, seed: int = 0, **overrides) -> Path:
    """A random tiny model of ``model_type`` with its language-model head, and the tokenizer beside it."""
    return save_tiny_model(model_type, folder, seed=seed, tokenizer=tokenizer, lm_head=True, **overrides)


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lm")
    # LLaMA with larger weights: sharper attention, so that a RoPE scaling visibly moves the loss
    return {"gpt2": _save_lm("gpt2", root / "gpt2", tokenizer), "bert": _save_lm("bert", root / "bert", tokenizer),
            "llama": _save_lm("llama", root / "llama", tokenizer, initializer_range=0.3)}


def _blocks(tokenizer, corpus: Path, length: int, blocks: int) -> np.ndarray:
    """The token blocks posviz attention would cut at ``length`` (independently of posviz extrapolate)."""
    from posviz.observe.corpus_blocks import make_token_blocks
    from posviz.train.corpus import load_corpus

    return make_token_blocks(tokenizer, load_corpus([str(corpus)]), length, blocks).ids


def _forward(folder: Path, ids: np.ndarray, **config_overrides):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    cfg = AutoConfig.from_pretrained(folder)
    auto = AutoModelForMaskedLM if cfg.model_type == "bert" else AutoModelForCausalLM
    if config_overrides:
        cfg = type(cfg)(**{**cfg.to_dict(), **config_overrides})
    model = auto.from_pretrained(folder, config=cfg, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(input_ids=torch.as_tensor(ids), output_attentions=True)


def _causal_nll(logits: np.ndarray, ids: np.ndarray, scored: np.ndarray) -> tuple[float, int]:
    """Summed next-token NLL of the tokens at ``scored`` positions (t >= 1), from float64 log-softmax."""
    z = logits[:, :-1].astype(np.float64)
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    picked = np.take_along_axis(logp, ids[:, 1:, None], axis=-1)[..., 0]
    mask = scored[:, 1:]
    return float(-picked[mask].sum()), int(mask.sum())


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_causal_loss_is_the_cross_entropy_of_the_models_logits(models, tokenizer, corpus, kind):
    r = extrapolate(str(models[kind]), corpus=str(corpus), lengths=[L], max_blocks=5, layers="0")
    rec = r.records()[0]
    ids = _blocks(tokenizer, corpus, L, 5)
    text = np.zeros(ids.shape, dtype=bool)
    text[:, 1 : L - 1] = True  # [CLS] at 0, [SEP] at n-1: every text token is predicted, the specials are not
    nll, count = _causal_nll(_forward(models[kind], ids).logits.numpy(), ids, text)
    assert rec["objective"] == "causal" and rec["causal"] is True
    assert rec["tokens"] == count == 5 * (L - 2) and rec["blocks"] == 5
    assert rec["loss"] == pytest.approx(nll / count, rel=1e-6)
    assert rec["perplexity"] == pytest.approx(np.exp(nll / count), rel=1e-6)
    # the loss by position within the window: the token at t, predicted from the t before it, in equal buckets
    z = _forward(models[kind], ids).logits.numpy()[:, :-1].astype(np.float64)
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    each = -np.take_along_axis(logp, ids[:, 1:, None], axis=-1)[..., 0]  # (blocks, L - 1): the token at t = 1 … L - 1
    starts = rec["loss_positions"]
    assert starts == sorted({(i * L) // min(32, L) for i in range(min(32, L))})
    for b, (lo, hi) in enumerate(zip(starts, [*starts[1:], L], strict=True)):
        cells = [(w, t) for w in range(5) for t in range(max(lo, 1), hi) if text[w, t]]
        want = np.mean([each[w, t - 1] for w, t in cells]) if cells else None
        assert rec["loss_by_position"][b] == (None if want is None else pytest.approx(want, rel=1e-6)), (lo, hi)


def test_masked_loss_uses_the_seeded_masks(models, tokenizer, corpus):
    """15 % of the text positions of block w, drawn by default_rng([seed, n, 0, w]), replaced by [MASK] and scored."""
    r = extrapolate(str(models["bert"]), corpus=str(corpus), lengths=[L], max_blocks=4, layers="0", seed=7)
    rec = r.records()[0]
    ids = _blocks(tokenizer, corpus, L, 4)
    masked, inputs = np.zeros(ids.shape, dtype=bool), ids.copy()
    k = round(0.15 * (L - 2))
    for w in range(len(ids)):
        where = np.random.default_rng([7, L, 0, w]).choice(np.arange(1, L - 1), size=k, replace=False)
        masked[w, where] = True
    inputs[masked] = tokenizer.mask_token_id
    logits = _forward(models["bert"], inputs).logits.numpy().astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, ids[..., None], axis=-1)[..., 0][masked]
    assert rec["objective"] == "masked" and rec["causal"] is False and rec["tokens"] == masked.sum() == 4 * k
    assert rec["loss"] == pytest.approx(nll.mean(), rel=1e-6)
    assert "seed 7" in rec["protocol"] and "15%" in rec["protocol"]
    each = -np.take_along_axis(logp, ids[..., None], axis=-1)[..., 0]  # (blocks, L)
    starts = rec["loss_positions"]
    for b, (lo, hi) in enumerate(zip(starts, [*starts[1:], L], strict=True)):
        cells = each[:, lo:hi][masked[:, lo:hi]]
        assert rec["loss_by_position"][b] == (pytest.approx(cells.mean(), rel=1e-6) if cells.size else None), (lo, hi)
    assert "loss_by_position" not in r.to_frame().columns


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_head_statistics_match_numpy_and_posviz_attention(models, tokenizer, corpus, kind):
    """Entropy, largest weight and sink from the attention maps directly; share and Toeplitzness as posviz attention gives them."""
    import posviz

    r = extrapolate(str(models[kind]), corpus=str(corpus), lengths=[L], max_blocks=3, batch_size=2, exact_maps=True)
    rec = r.records()[0]
    run = r.runs[0]
    default = extrapolate(str(models[kind]), corpus=str(corpus), lengths=[L], max_blocks=3, batch_size=2)  # tiles
    ids = _blocks(tokenizer, corpus, L, 3)
    if kind == "bert":  # the model ran on the masked blocks: measure the same input
        from posviz.extrapolation.blocks import length_blocks, text_budget
        from posviz.train.corpus import load_corpus

        budget = text_budget(tokenizer, load_corpus([str(corpus)]), L, 3)
        ids = length_blocks(budget, L, objective="masked", mask_id=tokenizer.mask_token_id).inputs
    maps = [a.double().numpy() for a in _forward(models[kind], ids).attentions]  # layers of (B, H, n, n)
    same = posviz.attention(str(models[kind]), token_blocks=ids, layers="all", exact_maps=True)  # the eager path, to the bit
    tiled = posviz.attention(str(models[kind]), token_blocks=ids, layers="all")  # the default: tiles, to 1e-5
    causal = kind == "gpt2"
    keys = np.arange(2, L + 1) if causal else np.full(L - 1, L)
    by = {(h["layer"], h["head"]): h for h in rec["heads"]}
    assert sorted(by) == [(layer, h) for layer in range(2) for h in range(4)]
    for layer, a in enumerate(maps):
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = -np.where(a > 0, a * np.log(a), 0.0).sum(-1)  # (B, H, n)
        want_entropy = ent[:, :, 1:].mean(axis=(0, 2))
        want_norm = (ent[:, :, 1:] / np.log(keys)).mean(axis=(0, 2))
        want_max = a.max(-1)[:, :, 1:].mean(axis=(0, 2))
        want_sink = a[:, :, 1:, 0].mean(axis=(0, 2))
        for h in range(4):
            got = by[(layer, h)]
            assert got["entropy"] == pytest.approx(want_entropy[h], rel=1e-5)
            assert got["entropy_normalised"] == pytest.approx(want_norm[h], rel=1e-5)
            assert got["max_weight"] == pytest.approx(want_max[h], rel=1e-5)
            assert got["sink_mass"] == pytest.approx(want_sink[h], rel=1e-5)
            assert got["positional_share"] == pytest.approx(float(same.stats[layer].positional_share[h]), abs=1e-9)
            assert got["toeplitzness_offdiag"] == pytest.approx(float(same.stats[layer].toeplitzness_offdiag[h]), abs=1e-9)
            for name in ("positional_share", "toeplitzness_offdiag", "sink_mass", "entropy", "max_weight")[: 5 if tiled.tiled else 3]:
                assert float(getattr(tiled.stats[layer], name)[h]) == pytest.approx(got[name], abs=1e-5), name
            tiles = {(x["layer"], x["head"]): x for x in default.records()[0]["heads"]}[(layer, h)]
            for name in ("entropy", "entropy_normalised", "max_weight", "sink_mass", "positional_share", "toeplitzness_offdiag"):
                assert tiles[name] == pytest.approx(got[name], abs=1e-5), name  # the default's tiles, the eager maps
        np.testing.assert_allclose(run.heads[layer].entropy_by_query, ent.mean(axis=0), rtol=1e-5, atol=1e-7)


def test_lengths_beyond_a_learned_table_are_na(models, corpus):
    import posviz

    r = posviz.extrapolate([str(models["gpt2"]), str(models["llama"])], corpus=str(corpus), lengths="16,32,48", max_blocks=2,
                           layers="0")  # the public API: a plain function
    assert isinstance(r, posviz.ExtrapolationResult)
    recs = {(x["model"], x["length"]): x for x in r.records()}
    gpt2, llama = str(models["gpt2"]), str(models["llama"])
    na = recs[(gpt2, 48)]
    assert na["loss"] is None and na["perplexity"] is None and na["heads"] == [] and "40 positions" in na["reason"]
    assert na["table_length"] == 40 and na["training_length"] == 40
    assert recs[(gpt2, 32)]["loss"] is not None and recs[(gpt2, 32)]["reason"] is None
    # RoPE has no table: 48 runs (and 64 is only the declared training length)
    assert recs[(llama, 48)]["loss"] is not None and recs[(llama, 48)]["table_length"] is None
    assert recs[(llama, 48)]["training_length"] == 64
    # the same text at every length: the budget is 2 blocks of the longest length, shorter lengths cover it in whole blocks
    assert r.budget[gpt2] == 2 * (48 - 2)
    assert recs[(gpt2, 16)]["text_tokens"] == (92 // 14) * 14 and recs[(gpt2, 32)]["text_tokens"] == 90
    frame = r.to_frame()
    assert len(frame) == 2 * 4 + 1 + 3 * 4  # gpt2: 2 lengths x 4 heads + one n/a row; llama: 3 x 4
    assert frame.loc[frame["length"].eq(48) & frame["model"].eq(gpt2), "layer"].isna().all()


def test_minilm_has_no_head_and_no_position_1024(minilm_dir):
    """The packaged MiniLM: a BERT encoder without its masked-LM head, and a 512-position table."""
    r = extrapolate("sentence-transformers/all-MiniLM-L6-v2", lengths="64,1024", max_blocks=1, layers="0")
    at64, at1024 = r.records()
    assert at64["loss"] is None and "no trained masked-LM head" in at64["reason"] and len(at64["heads"]) == 12
    assert at1024["loss"] is None and "512 positions" in at1024["reason"] and at1024["heads"] == []
    assert at1024["training_length"] == 512 and at64["corpus_sha256"] == at1024["corpus_sha256"]


def test_rope_scaling_is_transformers_own(models, tokenizer, corpus):
    """A variant equals the model transformers builds with that rope_scaling, and differs from the unscaled one."""
    import torch
    from transformers import AutoModelForCausalLM

    from posviz.extrapolation.scaling import parse_scaling
    from posviz.observe.loading import load_model

    r = extrapolate(str(models["llama"]), corpus=str(corpus), lengths=[L], max_blocks=3, layers="0",
                    rope_scaling=["linear:4", "yarn:2"])
    recs = {x["variant"]: x for x in r.records()}
    assert list(recs) == ["unscaled", "linear:4", "yarn:2"]
    assert recs["yarn:2"]["rope_scaling"] == {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}
    ids = _blocks(tokenizer, corpus, L, 3)
    text = np.zeros(ids.shape, dtype=bool)
    text[:, 1 : L - 1] = True
    for variant, scaling in (("unscaled", None), ("linear:4", {"rope_type": "linear", "factor": 4.0}),
                             ("yarn:2", {"rope_type": "yarn", "factor": 2.0})):
        logits = _forward(models["llama"], ids, **({"rope_scaling": scaling} if scaling else {})).logits.numpy()
        nll, count = _causal_nll(logits, ids, text)
        assert recs[variant]["loss"] == pytest.approx(nll / count, rel=1e-6)
    assert abs(recs["linear:4"]["loss"] - recs["unscaled"]["loss"]) > 1e-4
    plain = AutoModelForCausalLM.from_pretrained(models["llama"])
    scaled = load_model(str(models["llama"]), head="causal-lm", with_tokenizer=False,
                        config_edit=parse_scaling("linear:4").apply).model
    freq = [next(m.inv_freq for m in x.modules() if hasattr(m, "inv_freq")) for x in (plain, scaled)]
    torch.testing.assert_close(freq[1], freq[0] / 4)


def test_dynamic_and_llama3_scaling_are_transformers_own_past_the_trained_length(models, tokenizer, corpus):
    """Past the 64 positions LLaMA declares, dynamic (NTK) and llama3 variants equal transformers' own models."""
    from transformers import AutoConfig

    long = 2 * AutoConfig.from_pretrained(models["llama"]).max_position_embeddings
    r = extrapolate(str(models["llama"]), corpus=str(corpus), lengths=[L, long], max_blocks=2, layers="0",
                    rope_scaling=["dynamic:2", "llama3:4"])
    recs = {(x["variant"], x["length"]): x for x in r.records()}
    assert recs[("llama3:4", long)]["rope_scaling"] == {
        "rope_type": "llama3", "factor": 4.0, "original_max_position_embeddings": 64, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0}
    ids = _blocks(tokenizer, corpus, long, 2)  # the budget: 2 windows of the longest length
    text = np.zeros(ids.shape, dtype=bool)
    text[:, 1 : long - 1] = True
    for variant in ("unscaled", "dynamic:2", "llama3:4"):
        scaling = recs[(variant, long)]["rope_scaling"]
        logits = _forward(models["llama"], ids, **({"rope_scaling": scaling} if scaling else {})).logits.numpy()
        nll, count = _causal_nll(logits, ids, text)
        assert recs[(variant, long)]["loss"] == pytest.approx(nll / count, rel=1e-6), variant
    # NTK scaling starts past the declared length: the same loss within it, another one beyond it
    assert recs[("dynamic:2", L)]["loss"] == pytest.approx(recs[("unscaled", L)]["loss"], rel=1e-9)
    assert abs(recs[("dynamic:2", long)]["loss"] - recs[("unscaled", long)]["loss"]) > 1e-4
    assert abs(recs[("llama3:4", long)]["loss"] - recs[("unscaled", long)]["loss"]) > 1e-4


def test_sliding_window_scores_every_token_once(models, tokenizer, corpus):
    """Stride S: the first window scores all its text, each later one its last S tokens, with the rest as context."""
    from posviz.extrapolation.blocks import text_budget
    from posviz.train.corpus import load_corpus

    stride = 6
    r = extrapolate(str(models["llama"]), corpus=str(corpus), lengths=[L], max_blocks=3, layers="0", stride=stride)
    rec = r.records()[0]
    stream = text_budget(tokenizer, load_corpus([str(corpus)]), L, 3).tokens
    b = L - 2
    starts = range(0, len(stream) - b + 1, stride)
    ids = np.array([[tokenizer.cls_token_id, *stream[s : s + b], tokenizer.sep_token_id] for s in starts])
    scored = np.zeros(ids.shape, dtype=bool)
    scored[0, 1 : b + 1] = True
    scored[1:, b + 1 - stride : b + 1] = True
    nll, count = _causal_nll(_forward(models["llama"], ids).logits.numpy(), ids, scored)
    assert rec["tokens"] == count == rec["text_tokens"] == list(starts)[-1] + b and rec["blocks"] == len(ids)
    assert rec["stride"] == stride and len(stream) - rec["text_tokens"] < stride
    assert rec["loss"] == pytest.approx(nll / count, rel=1e-6)


def test_posviz_runs(absolute_run, tisa_run, train_corpus):
    """A run is a masked LM (its config says nothing causal); beyond its table (--seq-len 32): n/a, never a crash."""
    r = extrapolate([str(absolute_run), f"{tisa_run}@12"], corpus=str(train_corpus), lengths="16,32,48", max_blocks=2,
                    layers="0")
    recs = r.records()
    absolute = [x for x in recs if x["model"].startswith(f"run {absolute_run}")]
    tisa = [x for x in recs if "tisa" in x["model"]]
    assert [x["objective"] for x in recs] == ["masked"] * 6 and all(x["training_length"] == 32 for x in recs)
    assert [x["loss"] is None for x in absolute] == [False, False, True] and "32 positions" in absolute[2]["reason"]
    assert all(x["loss"] is not None for x in tisa[:2])
    beyond = tisa[2]  # TISA has no table: it runs, or the model's own refusal is recorded
    assert (beyond["loss"] is not None) != (beyond["reason"] is not None and "refuses length 48" in beyond["reason"])


def test_cli_json_interface_and_outputs(models, corpus, tmp_path):
    runner = CliRunner()
    args = ["extrapolate", str(models["gpt2"]), "--corpus", str(corpus), "--lengths", "16,48", "--max-blocks", "2",
            "--layers", "0"]
    res = runner.invoke(app, [*args, "--format", "json"])
    assert res.exit_code == 0, res.output
    recs = json.loads(res.stdout)
    assert isinstance(recs, list) and [x["length"] for x in recs] == [16, 48]
    for x in recs:
        assert {"model", "length", "loss", "heads", "perplexity", "reason", "training_length", "blocks", "tokens",
                "corpus_sha256", "protocol", "variant", "rope_scaling"} <= set(x)
    assert recs[1]["loss"] is None and recs[1]["reason"]
    assert {"layer", "head", "entropy", "sink_mass", "entropy_normalised", "max_weight", "positional_share",
            "toeplitzness_offdiag"} <= set(recs[0]["heads"][0])
    fig, table, csv = tmp_path / "e.png", tmp_path / "e.txt", tmp_path / "e.csv"
    res = runner.invoke(app, [*args, "-o", str(fig), "-o", str(table), "-o", str(csv)])
    assert res.exit_code == 0, res.output
    assert fig.stat().st_size > 0 and "n/a [1]" in table.read_text() and "[1] longer than" in table.read_text()
    assert csv.read_text().splitlines()[0].startswith("model,variant,length")
    res = runner.invoke(app, [*args, "-o", str(csv)])
    assert res.exit_code == 2 and "exists" in res.output
    assert runner.invoke(app, [*args, "-o", str(csv), "--force"]).exit_code == 0


def test_subprocess_table(models, corpus):
    out = subprocess.run([sys.executable, "-m", "posviz", "extrapolate", str(models["bert"]), "--corpus", str(corpus),
                          "--lengths", "16,32", "--max-blocks", "2"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "masked LM: 15% of the scored text tokens" in out.stdout and "sha256" in out.stdout
    assert len([line for line in out.stdout.splitlines() if "unscaled" in line]) == 2


def test_report_extrapolate_section_is_opt_in(models, corpus, tmp_path):
    import pypdf

    out = tmp_path / "r.pdf"
    res = CliRunner().invoke(app, ["report", str(models["gpt2"]), "--no-albert", "-o", str(out), "--extrapolate-lengths",
                                   "16,48", "--extrapolate-corpus", str(corpus), "--extrapolate-max-blocks", "2"])
    assert res.exit_code == 0, res.output
    assert "extrapolate" in res.stderr.split("sections:")[1]
    text = "".join(p.extract_text() for p in pypdf.PdfReader(out).pages)
    assert "Beyond the trained length" in text and "Press" in text and "causal: mean next-token NLL" in text
    assert "no loss at 48: longer than the model" in " ".join(text.split())
    bad = CliRunner().invoke(app, ["report", str(models["gpt2"]), "--no-albert", "-o", str(tmp_path / "b.pdf"),
                                   "--extrapolate-lengths", "16,x"])
    assert bad.exit_code == 2 and "'x' is not a length" in bad.output and not (tmp_path / "b.pdf").exists()


def test_a_length_the_model_refuses_is_na_and_other_errors_are_raised(absolute_run, train_corpus, monkeypatch):
    """Without the table check, the run's own ValueError at 48 > 32 positions becomes the record's reason."""
    import posviz.extrapolation.models as models_module
    from posviz.extrapolation.rows import RowSums

    monkeypatch.setattr(models_module, "table_length", lambda config, declared: None)
    r = extrapolate(str(absolute_run), corpus=str(train_corpus), lengths="32,48", max_blocks=2, layers="0")
    ok, refused = r.records()
    assert ok["loss"] is not None and refused["loss"] is None and refused["heads"] == []
    assert refused["reason"].startswith("the model refuses length 48: ValueError: sequence length 48 exceeds")

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in posviz, not the model")

    import posviz.observe.tiled.capture as capture_module

    monkeypatch.setattr(RowSums, "add", broken)  # the eager path (transformers 4.x)
    monkeypatch.setattr(capture_module, "accumulate", broken)  # the tiled path
    with pytest.raises(RuntimeError, match="a bug in posviz"):  # the model runs one window fine: not an n/a
        extrapolate(str(absolute_run), corpus=str(train_corpus), lengths="32", max_blocks=1, layers="0")


def test_causal_sinusoidal_and_rope_runs_go_past_their_length(train_corpus, tmp_path):
    """A sinusoidal run's table is computed for any length and RoPE has none: both are scored at twice their
    training length, as next-token models; a causal run with a learned table stops at its length."""

    from posviz.train import TrainOptions, train
    from tests.conftest import one_torch_thread

    runs = {}
    for scheme in ("sinusoidal", "rope", "absolute"):
        runs[scheme] = tmp_path / scheme
        with one_torch_thread():  # restored after: it used to stay at 1 for the worker's later tests
            train(TrainOptions(scheme=scheme, corpus=[str(train_corpus)], out=runs[scheme], steps=2, eval_every=2, seq_len=16,
                               vocab_size=300, max_eval_blocks=4, objective="causal"))
    recs = extrapolate([str(p) for p in runs.values()], corpus=str(train_corpus), lengths="16,32", max_blocks=2,
                       layers="0").records()
    by = {(next(s for s in runs if f"{runs[s]}" in x["model"]), x["length"]): x for x in recs}
    for scheme in ("sinusoidal", "rope"):
        assert by[(scheme, 32)]["loss"] is not None and by[(scheme, 32)]["table_length"] is None, by[(scheme, 32)]["reason"]
        assert by[(scheme, 32)]["objective"] == "causal" and by[(scheme, 32)]["training_length"] == 16
    assert by[("absolute", 16)]["loss"] is not None and by[("absolute", 32)]["loss"] is None
    assert "16 positions" in by[("absolute", 32)]["reason"]


_TABLES = {"gpt2": ("wpe.weight", 0, "n_positions"), "bert": ("embeddings.position_embeddings.weight", 0, "max_position_embeddings"),
           "roberta": ("embeddings.position_embeddings.weight", 2, "max_position_embeddings"),
           "opt": ("decoder.embed_positions.weight", 2, "max_position_embeddings")}


@pytest.mark.parametrize("model_type", sorted(_TABLES))
def test_interpolated_table_is_the_table_read_between_its_rows(model_type):
    """--extend-table's model against one built by hand: each column of the table by np.interp, transformers' own model
    of the longer length, the same outputs at every position; offset rows and every other weight unchanged."""
    import torch
    from transformers import AutoConfig, AutoModel

    from posviz.extrapolation.table import interpolate_table

    key, offset, field = _TABLES[model_type]
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(model_type, **TINY_CONFIGS[model_type])
    model = AutoModel.from_config(cfg, attn_implementation="eager").eval()
    state = model.state_dict()
    old = state[key].double().numpy()
    positions, n = old.shape[0] - offset, 64
    longer = interpolate_table(model, cfg.to_dict(), n)
    # by hand: row i of the new table is the old one read at i (T - 1) / (N - 1)
    x = np.arange(n) * (positions - 1) / (n - 1)
    rows = np.stack([np.interp(x, np.arange(positions), old[offset:, j]) for j in range(old.shape[1])], axis=1)
    got = longer.state_dict()
    np.testing.assert_allclose(got[key][offset:].double().numpy(), rows, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(got[key][:offset].numpy(), old[:offset].astype(np.float32))
    assert all(torch.equal(got[k], v) for k, v in state.items() if k != key and got[k].shape == v.shape)
    ref = AutoModel.from_config(AutoConfig.for_model(model_type, **{**TINY_CONFIGS[model_type], field: getattr(cfg, field) + n - positions}),
                                attn_implementation="eager").eval()
    hand = {k: v for k, v in state.items() if k != key and ref.state_dict()[k].shape == v.shape}
    hand[key] = torch.as_tensor(np.concatenate([old[:offset], rows]), dtype=torch.float32)
    ref.load_state_dict(hand, strict=False)
    ids = torch.as_tensor(np.random.default_rng(0).integers(3, 60, size=(2, n)))
    with torch.no_grad():
        np.testing.assert_allclose(longer(input_ids=ids).last_hidden_state.numpy(), ref(input_ids=ids).last_hidden_state.numpy(),
                                   rtol=0, atol=2e-5)
    assert longer.config._attn_implementation == "eager" and not longer.training


def test_extend_table_adds_an_interpolated_variant(models, corpus):
    with pytest.warns(UserWarning, match="llama has no learned position table to extend"):
        r = extrapolate([str(models["gpt2"]), str(models["llama"])], corpus=str(corpus), lengths="16,32,48", max_blocks=2,
                        layers="0", extend_table=True)
    gpt2, llama = str(models["gpt2"]), str(models["llama"])
    recs = {(x["model"], x["variant"], x["length"]): x for x in r.records()}
    assert recs[(gpt2, "unscaled", 48)]["loss"] is None
    for n in (16, 32, 48):
        rec = recs[(gpt2, "interpolated:48", n)]
        assert rec["loss"] is not None and rec["table_length"] == 48 and rec["training_length"] == 40
        assert rec["rope_scaling"] == {"type": "linear interpolation of the learned table", "from_positions": 40, "to_positions": 48}
    assert recs[(gpt2, "interpolated:48", 16)]["loss"] != recs[(gpt2, "unscaled", 16)]["loss"]  # every position is compressed
    assert {v for m, v, _ in recs if m == llama} == {"unscaled"}  # RoPE: no table to extend


def test_extend_table_cli_warns_for_a_model_without_a_table_and_refuses_device_map(models, corpus):
    res = CliRunner().invoke(app, ["extrapolate", str(models["llama"]), "--corpus", str(corpus), "--lengths", "16,32",
                                   "--max-blocks", "1", "--layers", "0", "--extend-table", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert "warning: --extend-table:" in res.stderr and "no learned position table" in res.stderr
    bad = CliRunner().invoke(app, ["extrapolate", str(models["gpt2"]), "--corpus", str(corpus), "--lengths", "16,64",
                                   "--extend-table", "--device-map", "auto"])
    assert bad.exit_code == 2 and bad.output.strip().count("\n") == 0 and "--extend-table does not combine" in bad.output


def test_extrapolate_along_checkpoints_is_posviz_extrapolate_at_each(tisa_run, absolute_run, train_corpus, tmp_path):
    """``posviz trajectory --measure extrapolate``: each checkpoint's loss at n, 2n and 4n is what ``posviz.extrapolate``
    gives that checkpoint on the same text; past a learned table (the absolute run's 32 positions) it is NaN, not an
    error; ``posviz measure extrapolate`` gives one model's."""
    import math

    import posviz

    series = posviz.trajectory(str(tisa_run), measure="extrapolate", corpus=str(train_corpus), seq_len=16, max_blocks=2)
    assert [r["step"] for r in series.rows] == [6, 12]
    for row in series.rows:
        alone = extrapolate(f"{tisa_run}@{row['step']}", corpus=str(train_corpus), lengths="16,32,64", max_blocks=2,
                            layers="0").records()
        for factor, rec in zip((1, 2, 4), alone, strict=True):
            loss = math.nan if rec["loss"] is None else rec["loss"]
            assert row[f"loss_{factor}x"] == pytest.approx(loss, nan_ok=True)
        assert row["growth_2x"] == pytest.approx(row["loss_2x"] - row["loss_1x"])
    absolute = posviz.trajectory(str(absolute_run), measure="extrapolate", corpus=str(train_corpus), seq_len=16,
                                 max_blocks=2).rows
    assert all(math.isfinite(r["loss_2x"]) and math.isnan(r["loss_4x"]) for r in absolute)  # 64 > its 32 positions
    out = tmp_path / "x.json"
    res = CliRunner().invoke(app, ["measure", "extrapolate", f"{tisa_run}@12", "--corpus", str(train_corpus), "--seq-len",
                                   "16", "--max-blocks", "2", "-o", str(out)])
    assert res.exit_code == 0, res.output
    (one,) = json.loads(out.read_text(encoding="utf-8"))
    assert one["loss_2x"] == pytest.approx(series.rows[-1]["loss_2x"])
    res = CliRunner().invoke(app, ["trajectory", str(tisa_run), "--measure", "extrapolate", "--layers", "0"])
    assert res.exit_code == 2 and "--layers does not apply to --measure extrapolate" in res.output

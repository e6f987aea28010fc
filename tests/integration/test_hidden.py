"""``posviz hidden`` on real tiny models: E_P itself at layer 0, a dense reference for every architecture, runs, CLI, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.observe.hidden import hidden
from posviz.toeplitz.engine import score_embeddings
from tests.checkpoint_factory import save_tiny_model as _save

pytestmark = pytest.mark.usefixtures("one_thread")

N = 16


@pytest.fixture(scope="module")
def bert(tmp_path_factory, tokenizer) -> Path:
    return _save("bert", tmp_path_factory.mktemp("bert"), tokenizer=tokenizer, vocab_size=len(tokenizer))


def test_gpt2_without_token_embeddings_has_e_p_at_layer_0(tmp_path):
    """GPT-2 has no embedding LayerNorm: with zero token embeddings layer 0 is E_P, in every block."""
    import torch
    from transformers import AutoModel

    folder = _save("gpt2", tmp_path / "gpt2", edit=lambda sd: sd["wte.weight"].zero_())
    ids = np.random.default_rng(0).integers(1, 64, size=(10, N))
    r = hidden(str(folder), token_blocks=ids, layers="0", null_draws=5, seed=3)
    table = AutoModel.from_pretrained(folder).wpe.weight.detach().double().numpy()[:N]
    want = score_embeddings(table, normalize="center", null_draws=5, seed=3)
    rec = r.records()[0]
    assert rec["toeplitzness_offdiag"] == pytest.approx(float(want.toeplitzness_offdiag), abs=1e-9)
    assert rec["toeplitzness"] == pytest.approx(float(want.toeplitzness), abs=1e-9)
    assert rec["toeplitzness_null_offdiag"] == pytest.approx(float(want.null_mean_offdiag), abs=1e-9)
    assert rec["toeplitzness_null"] == pytest.approx(float(want.null_mean), abs=1e-9)
    np.testing.assert_allclose(r.vectors[0], table - table.mean(axis=0), atol=1e-6 * np.abs(table).max())
    # every block is the same sequence of states: position is all the variance, the null is 1/B
    assert rec["positional_share"] == pytest.approx(1.0, abs=1e-9) and rec["positional_share_null"] == pytest.approx(0.1, abs=1e-12)
    assert rec["probe_mae"] < 0.1 * rec["probe_mae_baseline"] and rec["probe_order_accuracy"] == 1.0
    assert torch.get_num_threads() == 1


def _no_wpe(sd) -> None:  # NoPE: a GPT-2 whose position table is zero
    sd["wpe.weight"].zero_()


@pytest.mark.parametrize("model_type", ["bert", "albert", "gpt2", "gpt2-nope", "llama", "bloom", "t5"])
def test_statistics_match_dense_hidden_states(tmp_path, model_type):
    """Every field against numpy on all the hidden states at once (the streaming sums never hold them)."""
    import torch
    from transformers import AutoModel

    from posviz.observe.hidden_statistics import rank_summary
    from posviz.observe.hidden_sums import probe_plan
    from posviz.observe.probe import position_probe

    kind = model_type.removesuffix("-nope")
    folder = _save(kind, tmp_path / model_type, edit=_no_wpe if model_type.endswith("nope") else None)
    ids = np.random.default_rng(3).integers(1, 64, size=(9, N))
    r = hidden(str(folder), token_blocks=ids, batch_size=4, special_positions=[0], probe_blocks=8, probe_positions=6,
               null_draws=0, seed=1)
    model = AutoModel.from_pretrained(folder).eval()
    model = model.get_encoder() if kind == "t5" else model
    with torch.no_grad():
        states = [s.double().numpy() for s in model(input_ids=torch.as_tensor(ids), output_hidden_states=True).hidden_states]
    assert r.layers == list(range(len(states))) == list(range(3))
    kept = np.arange(1, N)
    plan = probe_plan(9, kept, probe_blocks=8, probe_positions=6, seed=1)
    for layer, h in enumerate(states):
        x = h[:, kept]  # (B, m, d)
        mu = x.mean(axis=(0, 1))
        v = x.mean(axis=0) - mu
        total = ((x - mu) ** 2).sum()
        within = ((x - x.mean(axis=1, keepdims=True)) ** 2).sum()
        rec = r.records()[layer]
        scale = np.abs(v).max()
        np.testing.assert_allclose(r.vectors[layer], v, atol=1e-5 * scale)
        assert rec["positional_share"] == pytest.approx(9 * (v**2).sum() / total, abs=1e-6)
        assert rec["positional_share_null"] == pytest.approx(within / (9 * total), abs=1e-6)
        s = score_embeddings(v, null_draws=1)  # the exact null mean, no draws
        assert rec["toeplitzness_offdiag"] == pytest.approx(float(s.toeplitzness_offdiag), abs=1e-4)
        assert rec["toeplitzness_null_offdiag"] == pytest.approx(float(s.null_mean_offdiag), abs=1e-4)
        assert rec["rank90"] == rank_summary(v)[0]
        sample = np.stack([h[b, where] for b, where in sorted(plan.items())]).astype(np.float32)
        positions = np.stack([where for _, where in sorted(plan.items())])
        p = position_probe(sample, positions, (1 + N - 1) / 2, seed=1)
        assert rec["probe_mae"] == pytest.approx(p.mae, abs=1e-3) and rec["probe_mae_baseline"] == p.mae_baseline
    assert r.excluded == [0] and "positions 0 left out" in r.conventions


def test_corpus_blocks_leave_special_tokens_out(bert, corpus):
    import posviz

    assert posviz.hidden is hidden  # the public API
    r = posviz.hidden(str(bert), corpus=str(corpus), seq_len=N, max_blocks=6, probe_blocks=4)
    assert r.excluded == [0, N - 1] and r.blocks == 6 and "[CLS] at position 0" in r.layout
    frame = r.to_frame()
    assert list(frame["layer"]) == [0, 1, 2] and (frame["positions"] == N - 2).all()
    assert set(frame.columns) >= {"positional_share", "positional_share_null", "toeplitzness_offdiag", "rank90", "probe_mae"}


def test_statistics_run_on_one_blas_thread_for_narrow_models(bert, corpus, monkeypatch):
    """A narrow model's statistics and probes see one BLAS thread whatever the caller allows (faster, and
    machine-independent); the probes' jobs carry that limit to the worker process."""
    from threadpoolctl import threadpool_info, threadpool_limits

    import posviz.observe.hidden_statistics as statistics
    import posviz.observe.probe as probe
    from posviz.observe.hidden_pass import SINGLE_THREAD_BELOW, probe_jobs, statistics_blas_threads
    from posviz.observe.hidden_sums import ProbeSample

    seen: dict[str, list[int]] = {"statistics": [], "probe": []}

    def observing(name, real):
        def observed(*args, **kwargs):
            seen[name].extend(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
            return real(*args, **kwargs)

        return observed

    monkeypatch.setattr(statistics, "layer_statistics", observing("statistics", statistics.layer_statistics))
    monkeypatch.setattr(probe, "position_probe", observing("probe", probe.position_probe))
    with threadpool_limits(limits=2, user_api="blas"):
        r = hidden(str(bert), corpus=str(corpus), seq_len=N, max_blocks=6, probe_blocks=4)
        rng = np.random.default_rng(0)
        sample = ProbeSample(blocks=[0, 1], positions=[np.arange(4)] * 2,
                             states={0: [rng.normal(size=(4, 8)).astype(np.float32)] * 2})
        (job,) = probe_jobs(sample, [0], 1.5, 0)
        job.run()  # what the worker process runs
    assert len(r.layers) == 3 and seen["statistics"] and set(seen["statistics"]) == {1}
    assert job.threads == 1 and seen["probe"] and set(seen["probe"]) == {1}
    assert statistics_blas_threads(SINGLE_THREAD_BELOW - 1) == 1 and statistics_blas_threads(SINGLE_THREAD_BELOW) is None


def test_runs_and_run_at_step(absolute_run, none_run, train_corpus):
    """posviz runs return their hidden states (embeddings mapped to the hidden size, then every layer)."""
    a = hidden(str(absolute_run), corpus=str(train_corpus), seq_len=32, max_blocks=8, probe_blocks=4)
    b = hidden(f"{absolute_run}@12", corpus=str(train_corpus), seq_len=32, max_blocks=8, probe_blocks=4)
    assert a.records() == b.records() and a.excluded == [0, 31]
    c = hidden(str(none_run), corpus=str(train_corpus), seq_len=32, max_blocks=8, probe_blocks=4, layers="0")
    # no position anywhere and a bidirectional encoder: layer 0 is a function of the token alone
    rec = c.records()[0]
    assert rec["positional_share"] < 3 * rec["positional_share_null"]


def test_seq_len_past_training_runs_table_free_schemes_and_refuses_tables(absolute_run, tisa_run, train_corpus):
    """Both runs trained at 32: TISA has no table and runs at 48 with a warning; absolute's 32-row table refuses 48."""
    from posviz.errors import OptionError
    from posviz.observe.attention import attention

    with pytest.warns(UserWarning, match="past the 32 positions .* trained at"):
        res = hidden(str(tisa_run), corpus=str(train_corpus), seq_len=48, max_blocks=6, probe_blocks=4, layers="0,1")
    assert [r["positions"] for r in res.records()] == [46, 46]  # [CLS] and [SEP] left out
    with pytest.warns(UserWarning, match="past the 32 positions"):
        att = attention(str(tisa_run), corpus=str(train_corpus), seq_len=48, max_blocks=4, layers="0")
    assert att.seq_len == 48 and att.blocks == 4
    for run in (hidden, attention):
        with pytest.raises(OptionError, match="longer than the 32 positions of .*learned table"):
            run(str(absolute_run), corpus=str(train_corpus), seq_len=48, max_blocks=4, layers="0")


def test_device_map_auto_matches_plain_cpu(bert, corpus):
    pytest.importorskip("accelerate")
    a = hidden(str(bert), corpus=str(corpus), seq_len=N, max_blocks=4, probe_blocks=2)
    b = hidden(str(bert), corpus=str(corpus), seq_len=N, max_blocks=4, probe_blocks=2, device_map="auto")
    assert [x["positional_share"] for x in a.records()] == pytest.approx([x["positional_share"] for x in b.records()], abs=1e-9)


def test_minilm_layers(minilm_dir, corpus):
    r = hidden(str(minilm_dir), corpus=str(corpus), seq_len=32, max_blocks=12, probe_blocks=8)
    rows = r.records()
    assert [x["layer"] for x in rows] == list(range(7)) and r.excluded == [0, 31]
    assert rows[0]["probe_mae"] < 0.5 * rows[0]["probe_mae_baseline"]  # a learned absolute table at layer 0
    assert rows[0]["positional_share"] > 1.5 * rows[0]["positional_share_null"]


def test_cli_json_interface(bert, corpus, tmp_path):
    res = CliRunner().invoke(app, ["hidden", str(bert), "--corpus", str(corpus), "--seq-len", str(N), "--max-blocks", "8",
                                   "--probe-blocks", "4", "-o", str(tmp_path / "h.png"), "-o", str(tmp_path / "h.csv")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "h.png").stat().st_size > 10_000 and (tmp_path / "h.csv").read_text().startswith("model,layer,")
    proc = subprocess.run([sys.executable, "-m", "posviz", "hidden", str(bert), "--corpus", str(corpus), "--seq-len", str(N),
                           "--format", "json", "--max-blocks", "8", "--probe-blocks", "4"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["layer"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert set(r) >= {"layer", "positional_share", "positional_share_null", "toeplitzness_offdiag", "toeplitzness",
                          "toeplitzness_null_offdiag", "rank90", "probe_mae", "probe_mae_baseline"}
        assert isinstance(r["rank90"], int) and r["blocks"] == 8 and r["seq_len"] == N
    table = CliRunner().invoke(app, ["hidden", str(bert), "--corpus", str(corpus), "--seq-len", str(N), "--max-blocks", "8",
                                     "--probe-blocks", "4", "--layers", "0,2"])
    assert table.exit_code == 0 and "pos. share" in table.stdout and "left out" in table.stdout


@pytest.mark.parametrize("case", ["empty corpus", "too long", "no such layer", "existing output", "bad device map"])
def test_bad_input_one_line_exit_2(bert, corpus, tmp_path, case):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    out = tmp_path / "out.json"
    if case == "existing output":
        out.write_text("keep me", encoding="utf-8")
    args = {"empty corpus": ["--corpus", str(empty)], "too long": ["--corpus", str(corpus), "--seq-len", "41"],
            "no such layer": ["--corpus", str(corpus), "--layers", "0,3"], "existing output": ["--corpus", str(corpus)],
            "bad device map": ["--corpus", str(corpus), "--device-map", "balanced"]}[case]
    res = CliRunner().invoke(app, ["hidden", str(bert), "--seq-len", str(N), *args, "-o", str(out)])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.output
    if case == "existing output":
        assert out.read_text(encoding="utf-8") == "keep me" and "--force" in lines[0]
    else:
        assert not out.exists()
    if case == "too long":
        assert "40 positions" in lines[0]


def test_model_without_hidden_states_fails_clearly():
    """A module whose output has no hidden_states: one clear error rather than wrong numbers."""
    import torch

    from posviz.errors import UnsupportedModelError
    from posviz.observe.hidden_sums import accumulate_hidden

    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)

        def forward(self, input_ids, attention_mask=None, **kwargs):
            return {"last_hidden_state": self.emb(input_ids)}

    with pytest.raises(UnsupportedModelError, match="returned no hidden states"):
        accumulate_hidden(Plain(), np.ones((2, 5), dtype=np.int64), [0], np.arange(5))


def test_trajectory_measure_hidden(absolute_run, train_corpus, tmp_path):
    res = CliRunner().invoke(app, ["trajectory", str(absolute_run), "--measure", "hidden", "--corpus", str(train_corpus),
                                   "--seq-len", "32", "--max-blocks", "6", "--layers", "0,2", "--format", "json",
                                   "--plot", str(tmp_path / "t.png")])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [(r["step"], r["layer"]) for r in rows] == [(6, 0), (6, 2), (12, 0), (12, 2)]
    assert {r["series"] for r in rows} == {f"{absolute_run} · layer 0", f"{absolute_run} · layer 2"}
    assert (tmp_path / "t.png").stat().st_size > 10_000
    # the same blocks, one checkpoint through the Python API
    direct = hidden(f"{absolute_run}@12", corpus=str(train_corpus), seq_len=32, max_blocks=6, layers="0,2").records()
    for got, want in zip(rows[2:], direct, strict=True):
        for key in ("positional_share", "positional_share_null", "toeplitzness_offdiag", "probe_mae", "rank90"):
            assert got[key] == want[key]
    table = CliRunner().invoke(app, ["trajectory", str(absolute_run), "--measure", "hidden", "--corpus", str(train_corpus),
                                     "--seq-len", "32", "--max-blocks", "6", "--layers", "0"])
    assert table.exit_code == 0 and "pos. share" in table.stdout and "MAE middle" in table.stdout


def test_report_hidden_section_is_opt_in(bert, corpus, tmp_path):
    import pypdf

    out = tmp_path / "r.pdf"
    res = CliRunner().invoke(app, ["report", str(bert), "--no-albert", "-o", str(out), "--hidden-corpus", str(corpus),
                                   "--hidden-seq-len", str(N), "--hidden-max-blocks", "6"])
    assert res.exit_code == 0, res.output
    assert "hidden" in res.stderr.split("sections:")[1]
    text = "".join(p.extract_text() for p in pypdf.PdfReader(out).pages)
    assert "Position inside the network" in text and "6 blocks of 16 tokens" in text and "Song" in text
    plain = CliRunner().invoke(app, ["report", str(bert), "--no-albert", "-o", str(tmp_path / "p.pdf")])
    assert plain.exit_code == 0 and "hidden" not in plain.stderr.split("sections:")[1]


def test_report_keeps_the_models_that_run_and_notes_the_one_that_cannot(bert, corpus, tokenizer, tmp_path):
    """A block longer than BERT's 40-row table leaves BERT out with the reason; a 64-position BERT beside it still runs."""
    import pypdf

    longer = _save("bert", tmp_path / "bert-64", tokenizer=tokenizer, vocab_size=len(tokenizer), max_position_embeddings=64)
    out = tmp_path / "r.pdf"
    res = CliRunner().invoke(app, ["report", str(bert), str(longer), "--no-albert", "-o", str(out), "--hidden-corpus",
                                   str(corpus), "--hidden-seq-len", "48", "--hidden-max-blocks", "6"])
    assert res.exit_code == 0, res.output
    text = " ".join(" ".join(p.extract_text() for p in pypdf.PdfReader(out).pages).split())
    assert f"Hidden states of {bert} left out: --seq-len 48 is longer than the 40 positions" in text
    assert text.count("6 blocks of 48 tokens") == 1  # the 64-position model's page


@pytest.mark.slow
def test_trajectory_measure_hidden_shared_out_under_torchrun(absolute_run, train_corpus, tmp_path):
    """Two processes, one checkpoint each: the merged rows, written by the main process, are the single-process ones."""
    import os

    args = ["trajectory", str(absolute_run), "--measure", "hidden", "--corpus", str(train_corpus), "--seq-len", "32",
            "--max-blocks", "6", "--layers", "0,2", "--format", "json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
                          "posviz", *args], capture_output=True, text=True, env=env, timeout=600)
    assert two.returncode == 0, two.stdout + two.stderr
    from tests.conftest import one_torch_thread

    with one_torch_thread():  # as the two processes (OMP_NUM_THREADS=1): the same float32 sums
        one = CliRunner().invoke(app, args)  # the single-process reference, in this process
    assert one.exit_code == 0, one.output
    merged, single = json.loads(two.stdout), json.loads(one.stdout)  # one JSON document: only the main process wrote
    assert [(r["step"], r["layer"]) for r in merged] == [(r["step"], r["layer"]) for r in single] == [(6, 0), (6, 2), (12, 0), (12, 2)]
    for a, b in zip(merged, single, strict=True):
        assert a.keys() == b.keys()
        for key, value in b.items():
            assert a[key] == (pytest.approx(value, rel=1e-9, abs=1e-12) if isinstance(value, float) else value), key

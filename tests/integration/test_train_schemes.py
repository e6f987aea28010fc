"""`posviz train --scheme rope|sinusoidal --objective causal` end to end: the run, its log, its analysis, fine-tuning,
the report, resume and bad input.

Numbers are checked against independent computations: the held-out next-token loss written out from the saved
checkpoint, band energies from the saved safetensors file, the sinusoidal E_P from its formula.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from typer.testing import CliRunner

from posviz.cli.app import app

pytestmark = pytest.mark.usefixtures("one_thread")

COMMON = ("--steps", "4", "--eval-every", "2", "--seq-len", "32", "--batch-size", "8", "--vocab-size", "600")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _train(out: Path, corpus: Path, *args: str) -> Path:
    res = invoke("train", "--corpus", str(corpus), "--out", str(out), *COMMON, *args)
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def rope_causal(train_corpus, tmp_path_factory) -> Path:
    """A causal RoPE run rotating half of each head's dimensions, base 1000. Do not modify."""
    return _train(tmp_path_factory.mktemp("runs") / "rope-causal", train_corpus, "--scheme", "rope", "--objective", "causal",
                  "--rope-base", "1000", "--rotary-fraction", "0.5")


@pytest.fixture(scope="module")
def sinusoidal_run(train_corpus, tmp_path_factory) -> Path:
    """A masked-LM run with the fixed sinusoidal table. Do not modify."""
    return _train(tmp_path_factory.mktemp("runs") / "sinusoidal", train_corpus, "--scheme", "sinusoidal")


def test_a_causal_rope_run_records_its_objective_and_logs_the_next_token_loss(rope_causal):
    import torch
    from transformers import AutoModelForCausalLM

    from posviz.train.data import split_blocks, tokenize_corpus
    from posviz.train.options import TrainOptions
    from posviz.train.run_folder import recorded_options

    run = json.loads((rope_causal / "run.json").read_text())
    assert (run["scheme"], run["objective"], run["rope_base"], run["rotary_fraction"]) == ("rope", "causal", 1000.0, 0.5)
    config = json.loads((rope_causal / "checkpoint-4" / "config.json").read_text())
    assert (config["is_causal"], config["rope_theta"], config["partial_rotary_factor"]) == (True, 1000.0, 0.5)
    assert config["architectures"] == ["PosvizForCausalLM"]
    evals = json.loads((rope_causal / "trajectory.json").read_text())["evaluations"]
    assert [e["step"] for e in evals] == [0, 2, 4]
    assert not any(k.startswith("toeplitzness") for e in evals for k in e)  # no table, no additive scores: bands are `heads`

    # the logged held-out loss is the next-token loss of the saved model, written out here
    options = TrainOptions(**recorded_options(rope_causal))
    tokenizer, blocks, _ = tokenize_corpus(options, rope_causal / "tokenizer")
    _, eval_set = split_blocks(tokenizer, blocks, options.max_eval_blocks, options.train_fraction, "causal")
    model = AutoModelForCausalLM.from_pretrained(rope_causal / "checkpoint-4").eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(eval_set.input_ids).logits.double(), dim=-1)
    ids = eval_set.input_ids
    nll = -logp[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]  # position i predicts token i + 1
    assert evals[-1]["eval_loss"] == pytest.approx(float(nll.mean()), rel=1e-5)
    predicted = logp[:, :-1].argmax(-1) == ids[:, 1:]
    assert evals[-1]["eval_accuracy"] == pytest.approx(float(predicted.double().mean()), abs=1e-12)


def test_resume_refuses_another_objective_or_rope_setting(rope_causal):
    for args, name in ((["--objective", "mlm"], "objective"), (["--rope-base", "10000"], "rope-base"),
                       (["--rotary-fraction", "1"], "rotary-fraction")):
        res = invoke("train", "--resume", "--out", str(rope_causal), *args)
        assert res.exit_code == 2, res.output
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: --resume cannot change --{name}: the run used "), res.stderr
    assert not (rope_causal / "checkpoint-6").exists()


def test_heads_of_a_rope_run_are_its_band_energies(rope_causal):
    res = invoke("heads", str(rope_causal), "--layer", "2", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    sd = load_file(str(rope_causal / "checkpoint-4" / "model.safetensors"))
    att = "albert.encoder.albert_layer_groups.0.albert_layers.0.attention."  # one shared layer group
    wq = sd[att + "query.weight"].astype(np.float64).reshape(4, 32, -1)  # tiny: 4 heads of 32 dims, 16 rotated
    wk = sd[att + "key.weight"].astype(np.float64).reshape(4, 32, -1)
    want = [[np.linalg.norm(wq[h, [b, b + 8]]) * np.linalg.norm(wk[h, [b, b + 8]]) for b in range(8)] for h in range(4)]
    np.testing.assert_allclose([r["band_energy"] for r in rows], want, rtol=1e-6)
    np.testing.assert_allclose(rows[0]["band_frequency"], 1000.0 ** (-np.arange(8) / 8), rtol=1e-15)
    assert rows[0]["causal"] is True and rows[0]["rotary_dim"] == 16
    table = invoke("heads", str(rope_causal))
    assert table.exit_code == 0 and "16 of 32 dims rotated" in table.stdout


def test_a_sinusoidal_run_logs_and_scores_its_fixed_table(sinusoidal_run):
    from posviz.read.embeddings import sinusoidal_embeddings
    from posviz.toeplitz import score_embeddings

    evals = json.loads((sinusoidal_run / "trajectory.json").read_text())["evaluations"]
    table = sinusoidal_embeddings(32, 64)  # tiny: embedding size 64; 32 positions
    want = score_embeddings(table, null_draws=0)
    assert all(e["toeplitzness_ep"] == pytest.approx(want.toeplitzness, abs=1e-12) for e in evals)  # fixed: never moves
    assert all(len(e["toeplitzness_heads"]) == 4 for e in evals)
    res = invoke("toeplitzness", str(sinusoidal_run), "--format", "json", "--null-draws", "0")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["toeplitzness"] == pytest.approx(want.toeplitzness, abs=1e-12)
    weights = load_file(str(sinusoidal_run / "checkpoint-4" / "model.safetensors"))
    assert not [k for k in weights if "position" in k]


def test_fine_tuning_rope_sinusoidal_and_causal_runs(rope_causal, sinusoidal_run, fruit_csv, tmp_path):
    import shutil

    for run in (rope_causal, sinusoidal_run):
        copy = shutil.copytree(run, tmp_path / run.name)
        res = invoke("finetune", str(copy), "--task", f"csv:{fruit_csv}", "--steps", "2", "--batch-size", "16", "--format", "json")
        assert res.exit_code == 0, res.output
        assert {r["metric"] for r in json.loads(res.stdout)} == {"accuracy", "score"}
        doc = json.loads(next((copy / "finetune").rglob("*.json")).read_text())
        causal = run is rope_causal
        assert doc["settings"].get("pooling") == ("last real token (causal run: its causal mask kept)" if causal else None)


def test_report_of_rope_sinusoidal_and_causal_runs(rope_causal, sinusoidal_run, tmp_path):
    from pypdf import PdfReader

    out = tmp_path / "runs.pdf"
    res = invoke("report", str(rope_causal), str(sinusoidal_run), "-o", str(out))
    assert res.exit_code == 0, res.output
    text = "\n".join(page.extract_text() for page in PdfReader(out).pages)
    assert "band energy" in text and "sinusoidal" in text
    # one causal run beside a masked LM: the training page says which loss each logged (the log keys are shared)
    assert "Held-out MLM or next-token loss" in text and f"Causal runs ({rope_causal}" in " ".join(text.split())


@pytest.mark.parametrize(("args", "fragment"), [
    (["--scheme", "rope", "--rope-base", "1"], "--rope-base must be above 1"),
    (["--scheme", "rope", "--rotary-fraction", "0"], "--rotary-fraction must be above 0 and at most 1"),
    (["--scheme", "rope", "--rotary-fraction", "1.5"], "--rotary-fraction must be above 0 and at most 1"),
    (["--scheme", "rope", "--rotary-fraction", "0.3"], "--rotary-fraction 0.3 rotates 9 of the 32 dimensions"),
    (["--scheme", "tisa", "--rope-base", "500"], "--rope-base applies to --scheme rope only"),
    (["--scheme", "sinusoidal", "--rotary-fraction", "0.5"], "--rotary-fraction applies to --scheme rope only"),
    (["--scheme", "rope", "--objective", "prefix"], "Invalid value"),
])
def test_bad_rope_and_objective_options_give_one_line(args, fragment, train_corpus, tmp_path):
    res = invoke("train", "--corpus", str(train_corpus), "--out", str(tmp_path / "run"), *args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], res.stderr
    assert not (tmp_path / "run").exists()


def test_trajectories_of_rope_and_sinusoidal_runs(rope_causal, sinusoidal_run):
    res = invoke("trajectory", str(rope_causal), "--format", "json")  # a RoPE run's default measure: its bands
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert {r["step"] for r in rows} == {2, 4} and all(len(r["band_energy"]) == 8 for r in rows)
    res = invoke("trajectory", str(sinusoidal_run), "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    # the fixed table is the same at every step; the checkpoints are not duplicates for that (their weights differ)
    assert len({r["toeplitzness"] for r in rows}) == 1 and not any(r.get("duplicate_of") for r in rows)

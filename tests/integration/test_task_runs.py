"""`posviz train --task` and `posviz extrapolate --task`: the task's data, vocabulary and answer-only loss, exact match
against greedy decoding done by hand, records per task length, and bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from posviz.cli.app import app
from posviz.tasks import make_split, task_vocabulary
from tests.conftest import one_torch_thread

pytestmark = pytest.mark.usefixtures("one_thread")

#: A short copy run: lengths 1-4, positions for 8, 30 steps.
TASK_ARGS = ["--task", "copy", "--train-length", "4", "--test-length", "8", "--examples", "64", "--steps", "30",
             "--eval-every", "15", "--batch-size", "16"]


def cli(*args: str):
    return CliRunner().invoke(app, [*args])


def _train(out: Path, scheme: str) -> Path:
    with one_torch_thread():
        res = cli("train", "--scheme", scheme, "--out", str(out), *TASK_ARGS)
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def copy_runs(tmp_path_factory) -> dict[str, Path]:
    """Two finished copy runs: a learned table (absolute) and RoPE. Do not modify."""
    root = tmp_path_factory.mktemp("task-runs")
    return {s: _train(root / s, s) for s in ("absolute", "rope")}


def test_a_task_run_records_its_data_and_vocabulary(copy_runs):
    from transformers import AutoTokenizer

    out = copy_runs["rope"]
    info = json.loads((out / "run.json").read_text())
    assert info["task"] == "copy" and info["objective"] == "causal" and info["corpus"] == []
    assert info["seq_len"] == 2 * 8 + 3  # [BOS] 8 items [SEP] 8 items [EOS]
    train = make_split("copy", range(1, 5), 64, seed=0, purpose="train")
    assert info["task_data"]["train"]["sha256"] == train.sha256 and info["data_fingerprint"] == train.sha256[:16]
    assert info["train_blocks"] == 4 * 64
    tok = AutoTokenizer.from_pretrained(str(out / "tokenizer"))
    vocab = task_vocabulary("copy")
    assert tok("[BOS] a b p [SEP]", add_special_tokens=False)["input_ids"] == [vocab[s] for s in ("[BOS]", "a", "b", "p", "[SEP]")]
    assert tok("zz", add_special_tokens=False)["input_ids"] == [vocab["[UNK]"]]
    config = json.loads((out / "checkpoint-30" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (vocab["[BOS]"], vocab["[EOS]"], vocab["[PAD]"])
    log = json.loads((out / "trajectory.json").read_text())["evaluations"]
    assert [r["step"] for r in log] == [0, 15, 30] and all(0 <= r["eval_exact_match"] <= 1 for r in log)


def test_the_loss_is_on_the_answer_only(copy_runs):
    """The model's loss on a collated batch equals cross-entropy over the answer tokens and [EOS], computed here."""
    from posviz.models import PosvizForCausalLM
    from posviz.train.task_data import TaskCollator, TaskExamples

    model = PosvizForCausalLM.from_pretrained(str(copy_runs["rope"] / "checkpoint-30")).eval()
    split = make_split("copy", [1, 3], 2, seed=5)
    batch = TaskCollator(task_vocabulary("copy")["[PAD]"])([TaskExamples(split)[i] for i in range(4)])
    with torch.no_grad():
        out = model(**batch)
    logits = out.logits.double()
    nll = []
    for row, (ids, start) in enumerate([x for n in (1, 3) for x in split.encode(n)]):
        for t in range(start, len(ids)):  # the answer and [EOS], each predicted from the token before it
            nll.append(-torch.log_softmax(logits[row, t - 1], -1)[ids[t]].item())
    assert out.loss.item() == pytest.approx(np.mean(nll), rel=1e-5)


def _greedy(model, prompt: list[int], steps: int) -> list[int]:
    """Greedy decoding by hand: the argmax of the last position, appended, ``steps`` times."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def test_exact_match_is_greedy_decoding(copy_runs):
    """Teacher-forced exact match says yes to the answer greedy decoding writes, and no to any answer differing from it."""
    from posviz.models import PosvizForCausalLM
    from posviz.train.task_data import answer_scores

    model = PosvizForCausalLM.from_pretrained(str(copy_runs["rope"] / "checkpoint-30")).eval()
    for (ids, start) in make_split("copy", [2, 6], 3, seed=1).encode(6):
        written = _greedy(model, ids[:start], len(ids) - start)
        for j in (None, 0, len(written) - 1):  # the greedy answer, then one token changed (first, last)
            answer = list(written)
            if j is not None:
                answer[j] = (answer[j] + 1) % len(task_vocabulary("copy"))
            full = np.array([ids[:start] + answer])
            labels = np.where(np.arange(full.shape[1]) >= start, full, -100)
            with torch.no_grad():
                preds = model(input_ids=torch.as_tensor(full)).logits.argmax(-1).numpy()
            correct, exact = answer_scores(preds, labels)
            assert bool(exact[0]) is (j is None)
            assert int(correct[0]) <= len(answer) - (j is not None)


def test_extrapolate_task_records(copy_runs, tmp_path):
    res = cli("extrapolate", str(copy_runs["absolute"]), str(copy_runs["rope"]), "--task", "copy", "--lengths", "2,4,8,9",
              "--examples", "12", "--format", "json")
    assert res.exit_code == 0, res.output
    records = json.loads(res.stdout)
    assert [(r["length"], r["train_length"]) for r in records] == [(n, 4) for n in (2, 4, 8, 9)] * 2
    absolute, rope = records[:4], records[4:]
    assert absolute[3]["accuracy"] is None and "beyond the model's learned table (19)" in absolute[3]["reason"]
    for r in absolute[:3] + rope:
        assert 0 <= r["accuracy"] <= r["token_accuracy"] <= 1 or r["accuracy"] == 0
        assert r["loss"] > 0 and r["examples"] == 12 and len(r["heads"]) == 4 * 4  # tiny: 4 layers x 4 heads
    assert rope[3]["positions"] == 2 * 9 + 3  # RoPE takes the length past its positions
    # the loss and accuracy at length 4 against a computation here, on the same seeded test examples
    from posviz.models import PosvizForCausalLM
    from posviz.train.task_data import answer_scores

    model = PosvizForCausalLM.from_pretrained(str(copy_runs["rope"] / "checkpoint-30")).eval()
    encoded = make_split("copy", [4], 12, seed=0, purpose="test").encode(4)
    ids = torch.tensor([x for x, _ in encoded])
    labels = np.array([[-100] * s + x[s:] for x, s in encoded])
    with torch.no_grad():
        logits = model(input_ids=ids).logits.double()
    logp = torch.log_softmax(logits[:, :-1], -1)
    keep = torch.as_tensor(labels[:, 1:] != -100)
    nll = -logp.gather(-1, ids[:, 1:, None])[..., 0][keep]
    correct, exact = answer_scores(logits.argmax(-1).numpy(), labels)
    assert rope[1]["loss"] == pytest.approx(nll.mean().item(), rel=1e-6)
    assert rope[1]["token_accuracy"] == pytest.approx(correct.sum() / keep.sum().item())
    assert rope[1]["accuracy"] == pytest.approx(exact.mean())
    assert rope[1]["data_sha256"] == make_split("copy", [2, 4, 8, 9], 12, seed=0, purpose="test").sha256
    # table and figure
    res = cli("extrapolate", str(copy_runs["rope"]), "--task", "copy", "--lengths", "2,8", "--examples", "4",
              "-o", str(tmp_path / "copy.png"), "-o", str(tmp_path / "copy.txt"))
    assert res.exit_code == 0, res.output
    assert "exact match" in (tmp_path / "copy.txt").read_text() and (tmp_path / "copy.png").stat().st_size > 10_000


def test_the_python_api_and_frame(copy_runs):
    import posviz

    r = posviz.extrapolate(str(copy_runs["rope"]), task="copy", lengths=[3, 5], examples=6, layers="0")
    frame = r.to_frame()
    assert list(frame.length.unique()) == [3, 5] and set(frame.layer) == {0} and len(frame) == 2 * 4
    assert r.records()[0]["task"] == "copy" and "exact match" in r.conventions


def test_a_run_of_a_shape_has_that_shape_and_is_evaluated_like_a_named_size(tmp_path):
    """--size LAYERSxWIDTH: the checkpoint has those dimensions (and heads of 32), the run records the shape and the
    default learning rate of the first named size at least as wide, and extrapolate reads its heads from it."""
    from posviz.models import size_dimensions

    out = tmp_path / "mini"
    with one_torch_thread():
        res = cli("train", "--scheme", "alibi", "--size", "2x64", "--out", str(out), *TASK_ARGS[:-6], "--steps", "4",
                  "--eval-every", "4", "--batch-size", "8")
    assert res.exit_code == 0, res.output
    info = json.loads((out / "run.json").read_text())
    assert info["size"] == "2x64" and info["learning_rate"] == 1e-3
    config = json.loads((out / "checkpoint-4" / "config.json").read_text())
    assert {k: config[k] for k in size_dimensions("2x64")} == dict(embedding_size=32, hidden_size=64, num_hidden_layers=2,
                                                                    num_attention_heads=2, intermediate_size=256)
    res = cli("extrapolate", str(out), "--task", "copy", "--lengths", "3,8", "--examples", "4", "--format", "json")
    assert res.exit_code == 0, res.output
    records = json.loads(res.stdout)
    assert [r["length"] for r in records] == [3, 8] and all(len(r["heads"]) == 2 * 2 for r in records)


@pytest.mark.parametrize("exact_maps", [False, True])
def test_offset_profiles_against_the_attention_maps(copy_runs, exact_maps):
    """The offset profile of a task length (tiled and eager) is the mean weight on each diagonal of the maps, computed here."""
    import posviz
    from posviz.models import PosvizForCausalLM

    r = posviz.extrapolate(str(copy_runs["rope"]), task="copy", lengths=[4], examples=12, layers="0,2", exact_maps=exact_maps)
    model = PosvizForCausalLM.from_pretrained(str(copy_runs["rope"] / "checkpoint-30"), attn_implementation="eager").eval()
    ids = torch.tensor([x for x, _ in make_split("copy", [4], 12, seed=0, purpose="test").encode(4)])
    maps = []  # eager attention passes every layer's probabilities through attention_probs (shared by ALBERT's layers)
    hooks = [m.register_forward_hook(lambda _m, _i, out: maps.append(out)) for name, m in model.named_modules()
             if name.endswith("attention_probs")]
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    n = ids.shape[1]
    for layer in (0, 2):
        p = maps[layer].double().numpy()  # (examples, heads, n, n)
        want = np.full((p.shape[1], 2 * n - 1), np.nan)
        for k in range(-(n - 1), 1):  # causal: keys at or before the query
            want[:, k + n - 1] = np.stack([np.diagonal(p[b], offset=k, axis1=1, axis2=2) for b in range(len(p))]).mean(axis=(0, 2))
        got = r.runs[0].profiles[layer]
        assert np.array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[:, : n], want[:, : n], atol=1e-6)
    rows = r.profile_records()
    assert {(x["layer"], x["offset"]) for x in rows} == {(layer, k) for layer in (0, 2) for k in range(-(n - 1), 1)}


@pytest.mark.parametrize(("args", "says"), [
    (["train", "--task", "sums", "--scheme", "none"], "unknown task 'sums'"),
    (["train", "--task", "copy", "--scheme", "none", "--train-length", "20", "--test-length", "10"], "--test-length 10 is below --train-length 20"),
    (["train", "--task", "copy", "--scheme", "none", "--corpus", "x.txt"], "--corpus does not apply to a --task run"),
    (["train", "--task", "copy", "--scheme", "none", "--objective", "mlm"], "a --task run is a causal LM"),
    (["train", "--scheme", "none", "--train-length", "20"], "--train-length applies to --task runs only"),
    (["train", "--task", "scan", "--scheme", "none", "--train-length", "0"], "--train-length"),
])
def test_bad_training_input_is_one_line_and_writes_nothing(args, says, tmp_path):
    out = tmp_path / "run"
    res = cli(*args, "--out", str(out))
    assert res.exit_code == 2, res.output
    assert says in res.output and len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert not out.exists()


def test_bad_evaluation_input(copy_runs, absolute_run, tmp_path):
    for args, says in [
        ([str(copy_runs["rope"]), "--task", "reverse"], "was trained on task copy, not reverse"),
        ([str(absolute_run), "--task", "copy"], "is not a posviz train --task run"),
        ([str(copy_runs["rope"]), "--task", "copy", "--lengths", "0"], "task copy has no length 0"),
        ([str(copy_runs["rope"]), "--task", "copy", "--corpus", "x.txt"], "do not apply with --task"),
        ([str(copy_runs["rope"]), "--task", "sums"], "unknown task 'sums'"),
    ]:
        out = tmp_path / "out.json"
        res = cli("extrapolate", *args, "-o", str(out))
        assert res.exit_code == 2, res.output
        assert says in res.output and len(res.output.strip().splitlines()) == 1, res.output
        assert not out.exists()


def test_a_task_run_resumes_and_refuses_other_task_options(tmp_path):
    out = tmp_path / "parity"
    small = ["--examples", "8", "--batch-size", "8", "--eval-every", "2"]
    assert cli("train", "--task", "parity", "--scheme", "alibi", "--steps", "4", "--out", str(out), *small).exit_code == 0
    res = cli("train", "--out", str(out), "--resume", "--steps", "6")
    assert res.exit_code == 0, res.output
    log = json.loads((out / "trajectory.json").read_text())["evaluations"]
    assert [r["step"] for r in log] == [0, 2, 4, 6] and json.loads((out / "run.json").read_text())["task"] == "parity"
    res = cli("train", "--out", str(out), "--resume", "--steps", "8", "--train-length", "5")
    assert res.exit_code == 2 and "--resume cannot change --train-length" in res.output

"""The version shims of ``posviz.util.compat``, exercised on whichever transformers/huggingface_hub is installed.

``make test`` runs this file on the oldest supported pair and on the newest, so each shim is tested both ways.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from posviz.util import compat  # noqa: E402


def test_hub_errors_name_the_classes_huggingface_hub_raises():
    import huggingface_hub

    errors = compat.hub_errors()
    for name in ("GatedRepoError", "RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError"):
        assert getattr(errors, name) is getattr(huggingface_hub.utils, name)
    assert issubclass(errors.GatedRepoError, errors.RepositoryNotFoundError)


def test_weight_init_copies_and_draws():
    init = compat.weight_init()
    buffer = torch.zeros(2, 3)
    init.copy_(buffer, torch.arange(6.0).reshape(2, 3))
    assert buffer.flatten().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    w = torch.empty(2000)
    init.normal_(w, mean=0.0, std=0.02)
    assert abs(float(w.std()) - 0.02) < 0.002
    init.zeros_(w)
    assert float(w.abs().sum()) == 0.0


def test_trainer_gets_the_tokenizer_under_the_keyword_it_knows(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, Trainer, TrainingArguments

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")),
                                  unk_token="[UNK]", clean_up_tokenization_spaces=False)
    (key,) = compat.trainer_tokenizer_kwargs(tok)
    from packaging.version import Version

    assert key == ("processing_class" if Version(transformers.__version__) >= Version("4.46") else "tokenizer")
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    trainer = Trainer(model=torch.nn.Linear(2, 2), args=args, **compat.trainer_tokenizer_kwargs(tok))
    assert getattr(trainer, key) is tok


def test_a_checkpoint_rng_state_reloads_under_the_resume_context(tmp_path):
    """What Trainer saves in rng_state.pth (numpy's state among them) loads back under torch's weights_only default."""
    import numpy as np

    path = tmp_path / "rng_state.pth"
    numpy_state = np.random.get_state()  # noqa: NPY002 - the legacy global state is what Trainer saves
    torch.save({"python": None, "numpy": numpy_state, "cpu": torch.random.get_rng_state()}, path)
    with compat.trainer_resume_context():
        from transformers import trainer_pt_utils

        if hasattr(trainer_pt_utils, "safe_globals"):  # transformers allowlists numpy itself
            with trainer_pt_utils.safe_globals():
                state = torch.load(path)
        else:
            state = torch.load(path)
    assert state["numpy"][0] == "MT19937" and np.array_equal(state["numpy"][1], numpy_state[1])


def test_a_bf16_run_does_not_leave_the_next_fp32_run_in_bf16(tmp_path, monkeypatch):
    """transformers 4.x carries --precision bf16 over to the next TrainingArguments of the process."""
    from posviz.train.options import TrainOptions, training_arguments

    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    options = TrainOptions(scheme="absolute", corpus=["x"], out=tmp_path / "run")
    training_arguments(options, {"bf16": True, "fp16": False, "use_cpu": True})
    fp32 = training_arguments(options, {"bf16": False, "fp16": False, "use_cpu": True})
    from transformers import Trainer

    trainer = Trainer(model=torch.nn.Linear(2, 2), args=fp32, eval_dataset=[0])
    assert trainer.accelerator.mixed_precision == "no"

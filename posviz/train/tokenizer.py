"""Tokenizers for ``posviz train``: an existing one, or a WordPiece trained on the corpus.

An existing tokenizer is a folder or a hub id, resolved like models
(:func:`load_tokenizer`); by default a lower-cased BERT-style WordPiece is
trained on the corpus with ``tokenizers``, deterministically
(:func:`train_tokenizer`). See ARCHITECTURE.md for the training data flow.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from posviz.errors import OptionError, SourceError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _wordpiece_vocab(bpe_vocab: dict[str, int]) -> dict[str, int]:
    """A WordPiece vocabulary from a BPE one whose word starts are marked with ``▁``.

    ``▁word`` becomes ``word`` and a word-internal ``piece`` becomes ``##piece``
    (what ``WordPiece.from_bpe`` does for BPE trained with the ``##`` prefix);
    every single character is added in both forms so that no word falls back to
    ``[UNK]`` for want of a first letter. Ids follow the BPE ids (merge order).
    """
    out: dict[str, int] = {}

    def add(token: str) -> None:
        if token and token not in out:
            out[token] = len(out)

    ordered = sorted(bpe_vocab, key=bpe_vocab.__getitem__)
    for token in ordered:
        if token in SPECIAL_TOKENS:
            add(token)
        elif token.startswith("▁"):
            add(token[1:])
        else:
            add("##" + token)
    for token in ordered:
        if len(token) == 1 and token != "▁" and token not in SPECIAL_TOKENS:
            add(token)
    return out


def train_tokenizer(texts: Sequence[str], vocab_size: int = 8000, model_max_length: int = 512):
    """A lower-cased WordPiece tokenizer (as BERT's) trained on ``texts``, deterministically.

    Parameters
    ----------
    texts
        Training documents.
    vocab_size
        Target size of the subword vocabulary (the result may differ by the
        characters added in both word-initial and ``##`` form).
    model_max_length
        Recorded in the tokenizer (the longest sequence the model takes).

    Returns
    -------
    transformers.PreTrainedTokenizerFast
        Normalisation and pre-tokenisation as BERT's (lower case, accents
        stripped, split at whitespace and punctuation), ``[PAD] [UNK] [CLS] [SEP]
        [MASK]`` as ids 0-4, texts wrapped as ``[CLS] ... [SEP]``.

    Notes
    -----
    ``tokenizers``' WordPiece trainer runs the BPE trainer and converts its
    vocabulary, but with the ``##`` prefix it breaks ties between equally
    frequent pairs in hash order, so two runs on the same text give different
    vocabularies. Here the BPE trainer runs on words marked with a ``▁`` start
    (its deterministic mode; a run must be reproducible from its seed) and the
    same conversion is done in :func:`_wordpiece_vocab`.
    """
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.normalizer = normalizers.BertNormalizer(lowercase=True)
    bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation()])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    bpe.train_from_iterator(texts, trainer=trainer)

    tok = Tokenizer(models.WordPiece(_wordpiece_vocab(bpe.get_vocab()), unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,  # transformers 5's default, stated so that 4.x decodes alike (and does not warn)
    )


def load_tokenizer(spec: str):
    """An existing tokenizer from a folder or hub id (packaged models resolve offline)."""
    from transformers import AutoTokenizer

    from posviz.read.sources import hub_offline, looks_like_hub_id, packaged_model_path

    path = Path(spec)
    packaged = packaged_model_path(spec) if not path.exists() else None
    where = str(path) if path.exists() else str(packaged[0]) if packaged else spec
    if not path.exists() and not packaged:
        if not looks_like_hub_id(spec):
            raise OptionError(f"tokenizer {spec} does not exist")
        if hub_offline():
            raise SourceError(f"tokenizer {spec!r} is not local and HF_HUB_OFFLINE is set", "pass a tokenizer folder, or omit --tokenizer to train one")
    try:
        tok = AutoTokenizer.from_pretrained(where)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SourceError(f"cannot load tokenizer {spec!r}: {first}", "pass a tokenizer folder, or omit --tokenizer to train one") from None
    missing = [name for name in ("cls_token", "sep_token", "mask_token", "pad_token") if getattr(tok, name, None) is None]
    if missing:
        raise OptionError(f"tokenizer {spec!r} has no {', '.join(missing)}", "masked-LM training needs [CLS], [SEP], [MASK] and [PAD] tokens")
    return tok

"""Built-in offline tasks made from any corpus: a word-order probe and a content-only control.

* ``builtin/bshift`` (SentEval's Bigram Shift, Conneau et al., 2018): were two
  adjacent words inverted? Only word order differs between the classes, so a
  model with no positional information (``posviz train --scheme none``:
  bidirectional attention, no positions, a permutation-invariant [CLS]) cannot
  tell them apart.
* ``builtin/shuffled``: was the sentence's word order shuffled? The same control
  (only order differs between the classes), and an easier word-order probe than
  bigram shift for small models: most of the sentence's bigrams change, not one.
* ``builtin/replaced``: was one word replaced by a random word of the corpus? The
  label is a function of the bag of words; order is not needed.

Every sentence appears in both versions, original (label 0) and altered (label 1),
in training and in dev, and train and dev sentences are disjoint. So a model
that gives a sentence and its permutation the same output scores exactly 50 % on
``bshift``'s and ``shuffled``'s dev sets: one version of each pair right, the other wrong.
Sentences are those of the corpus (split at sentence ends and line breaks) with
6 to 20 words, mostly alphabetic, deduplicated, in a fixed seeded order; with a
tokenizer, only sentences whose altered version fits the model's positions too.
Swaps of two words equal up to case (which change nothing) are never made.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from posviz.finetuning.taskdata import BUILTIN_NAMES, Example, TaskData, TaskError

MIN_WORDS, MAX_WORDS = 6, 20
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[.,;:!?]?")


def sentences(documents: list[str]) -> list[list[str]]:
    """Candidate sentences (as word lists) of a corpus, deduplicated, in corpus order."""
    seen: set[str] = set()
    out = []
    for doc in documents:
        for part in _SENTENCE_END.split(doc):
            words = part.split()
            if not MIN_WORDS <= len(words) <= MAX_WORDS:
                continue
            if sum(bool(_WORD.fullmatch(w)) for w in words) < 0.8 * len(words):
                continue  # code, tables, lists of symbols
            key = " ".join(words).lower()
            if key not in seen:
                seen.add(key)
                out.append(words)
    return out


def bigram_shift(words: list[str], rng: random.Random) -> list[str] | None:
    """``words`` with two adjacent words inverted, or ``None`` when every adjacent pair is equal up to case."""
    choices = [i for i in range(len(words) - 1) if words[i].lower() != words[i + 1].lower()]
    if not choices:
        return None
    i = rng.choice(choices)
    return [*words[:i], words[i + 1], words[i], *words[i + 2:]]


def shuffled_words(words: list[str], rng: random.Random) -> list[str] | None:
    """``words`` in a random order that differs from the original (up to case), or ``None`` when none does."""
    key = [w.lower() for w in words]
    for _ in range(10):
        order = list(range(len(words)))
        rng.shuffle(order)
        if [key[i] for i in order] != key:
            return [words[i] for i in order]
    return None


def replaced_word(words: list[str], rng: random.Random, vocabulary: list[str]) -> list[str] | None:
    """``words`` with one word replaced by a different word of ``vocabulary``."""
    i = rng.randrange(len(words))
    for _ in range(10):
        new = rng.choice(vocabulary)
        if new.lower() != words[i].lower():
            return [*words[:i], new, *words[i + 1:]]
    return None


def make_pairs(
    corpus_sentences: list[list[str]],
    task: str,
    n_pairs: int,
    fits: Callable[[str], bool] | None = None,
    *,
    seed: int = 0,
) -> list[tuple[str, str]]:
    """Up to ``n_pairs`` (original, altered) sentence pairs for ``task`` (``bshift``, ``shuffled`` or ``replaced``)."""
    rng = random.Random(seed)
    order = list(range(len(corpus_sentences)))
    rng.shuffle(order)
    vocabulary = sorted({w for s in corpus_sentences for w in s if _WORD.fullmatch(w)})
    pairs = []
    for i in order:
        words = corpus_sentences[i]
        if task == "bshift":
            altered = bigram_shift(words, rng)
        elif task == "shuffled":
            altered = shuffled_words(words, rng)
        else:
            altered = replaced_word(words, rng, vocabulary)
        if altered is None:
            continue
        original, changed = " ".join(words), " ".join(altered)
        if fits is not None and not (fits(original) and fits(changed)):
            continue
        pairs.append((original, changed))
        if len(pairs) >= n_pairs:
            break
    return pairs


def _corpus(corpus: list[str] | None) -> list[str]:
    from posviz.train.corpus import DEMO_CORPUS, load_corpus

    return load_corpus(corpus or [DEMO_CORPUS])


def load_builtin(
    spec: str,
    *,
    corpus: list[str] | None,
    train_size: int,
    dev_size: int,
    fits: Callable[[str], bool] | None = None,
) -> TaskData:
    """Make ``builtin/NAME``: ``dev_size`` dev examples then ``train_size`` training examples, each pair both ways."""
    name = spec.removeprefix("builtin/")
    if name not in BUILTIN_NAMES:
        raise TaskError(f"unknown built-in task {name!r}", f"choose one of {', '.join('builtin/' + n for n in BUILTIN_NAMES)}")
    from posviz.train.corpus import DEMO_CORPUS, corpus_identity

    n_dev, n_train = max(1, dev_size // 2), max(1, train_size // 2)
    texts = _corpus(corpus)
    pairs = make_pairs(sentences(texts), name, n_dev + n_train, fits)
    if len(pairs) < n_dev + 1:
        raise TaskError(f"task {spec}: the corpus gave only {len(pairs)} usable sentences",
                        "use a larger --corpus or a smaller --dev-size")

    def both(chunk: list[tuple[str, str]]) -> list[Example]:
        return [Example(text, None, label) for pair in chunk for label, text in enumerate(pair)]

    dev, train = both(pairs[:n_dev]), both(pairs[n_dev:])
    return TaskData(spec, train, {"": dev}, [0, 1], ("accuracy",),
                    {"corpus": list(corpus or [DEMO_CORPUS]), **corpus_identity(texts), "pairs": len(pairs)})

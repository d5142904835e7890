"""A tokenizer for the ground-truth stub's answers (``harness.openai_stub``): each chunk the
stub streams (``tok``) is one token of it, so a served run's tokenizer counts agree with the
stub's usage, as a real model's tokenizer agrees with its server's. Built here, byte for byte
the same each time: no file is fetched."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_stub_tokenizer"]

# A few words besides, for the synthetic prompts a run makes from the vocabulary.
_WORDS = ("hello", "world", "stub", "token")


def write_stub_tokenizer(path: Path) -> Path:
    """A byte-pair tokenizer.json at ``path`` whose vocabulary merges ``t o k`` into one
    token; ``path``."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import BPE

    letters = sorted({c for word in ("tok", *_WORDS) for c in word})
    vocabulary = {"<unk>": 0, **{c: i + 1 for i, c in enumerate(letters)}}
    merges = [("t", "o"), ("to", "k")]
    for word in _WORDS:  # each word one token too: merge its letters left to right
        for end in range(2, len(word) + 1):
            merges.append((word[: end - 1], word[end - 1]))
    for left, right in merges:
        vocabulary.setdefault(left + right, len(vocabulary))
    tokenizer = Tokenizer(BPE(vocabulary, list(dict.fromkeys(merges)), unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(path))
    return path

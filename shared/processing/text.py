"""Text to token tensors: the ``tokenize`` step, with the model's own tokenizer file.

A tokenizer is a Hugging Face ``tokenizer.json`` (the format the ``tokenizers`` library reads
and writes): its normaliser, pre-tokeniser, model (WordPiece, BPE, ...) and post-processor
(the special tokens a model expects around a text). Truncation is the tokenizer's own, so a
text cut to ``max_length`` keeps its special tokens; padding is done here, so its value and
side are what the step says whatever the file configures.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shared.manifests import ChatTemplateStep, TokenizeStep
from shared.processing.errors import ProcessingError

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

__all__ = [
    "left_padded",
    "load_tokenizer",
    "render_chat",
    "synthetic_texts",
    "synthetic_texts_of",
    "tokenize",
    "vocabulary_size",
]


@functools.lru_cache(maxsize=8)
def load_tokenizer(path: str) -> Tokenizer:
    """The tokenizer in the file at ``path`` (read once per process)."""
    # Imported on use: only the processes that run text models need the library.
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as exc:  # the library raises a bare Exception for a file it cannot read
        raise ProcessingError(f"{Path(path).name} is not a tokenizer.json: {exc}") from None
    tokenizer.no_padding()
    return tokenizer


def _encode(tokenizer: Tokenizer, texts: Sequence[object], max_length: int) -> list[Encoding]:
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ProcessingError(
                f"tokenize takes text, but sample {i} is a {type(text).__name__}: the data set "
                "must have element: {encoding: text}"
            )
    tokenizer.enable_truncation(max_length)
    return tokenizer.encode_batch(list(texts))


def tokenize(step: TokenizeStep, texts: Sequence[object], tokenizer: Tokenizer) -> np.ndarray:
    """``texts`` as the [batch, sequence] int64 tensor ``step`` takes from their tokens."""
    if not texts:
        raise ProcessingError("a batch needs at least one sample")
    encodings = _encode(tokenizer, texts, step.max_length)
    longest = max(len(e.ids) for e in encodings)
    length = step.max_length if step.padding == "max_length" else longest
    fill = step.pad_id if step.take == "ids" else 0
    tensor = np.full((len(encodings), length), fill, dtype=np.int64)
    for row, encoding in enumerate(encodings):
        values = {
            "ids": encoding.ids,
            "attention_mask": encoding.attention_mask,
            "type_ids": encoding.type_ids,
        }[step.take]
        tensor[row, : len(values)] = values
    return tensor


def left_padded(prompts: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of prompts of different lengths as one int64 [batch, longest] batch for a
    generation, each padded on the left (so every row's last position is a real token), with
    its attention mask (1 for a token, 0 for padding). The padding's id is 0: the mask hides
    it, whatever token that is."""
    longest = max(len(prompt) for prompt in prompts)
    ids = np.zeros((len(prompts), longest), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, longest - len(prompt) :] = prompt
        mask[row, longest - len(prompt) :] = 1
    return ids, mask


def vocabulary_size(tokenizer: Tokenizer) -> int:
    return int(tokenizer.get_vocab_size(with_added_tokens=True))


def synthetic_texts(tokenizer: Tokenizer, count: int, words: int, *, seed: int) -> list[str]:
    """``count`` seeded texts of ``words`` words each, drawn from the tokenizer's vocabulary
    (whole alphabetic words only, no special or continuation tokens): for a text model what
    random pixels are for an image model, each long enough to fill a ``max_length`` of
    ``words`` tokens."""
    vocabulary = _plain_words(tokenizer)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(vocabulary), size=(count, words))
    return [" ".join(vocabulary[i] for i in row) for row in picks]


def synthetic_texts_of(tokenizer: Tokenizer, lengths: Sequence[int], *, seed: int) -> list[str]:
    """Seeded texts of the tokenizer's words, each of ``lengths[i]`` tokens by that
    tokenizer: a longer text's first tokens, decoded (a cut between whole words, so encoding
    the text again gives those tokens)."""
    vocabulary = _plain_words(tokenizer)
    rng = np.random.default_rng([seed, _LENGTHS_STREAM])
    texts = []
    for length in lengths:
        words = length
        while True:  # a word is a token or more: a few more words than tokens suffice
            picks = rng.integers(0, len(vocabulary), size=words + 8)
            ids = tokenizer.encode(
                " ".join(vocabulary[i] for i in picks), add_special_tokens=False
            ).ids
            if len(ids) >= length:
                break
            words *= 2
        texts.append(tokenizer.decode(ids[:length], skip_special_tokens=False))
    return texts


# Texts of given lengths draw from a generator of their own: not synthetic_texts' words.
_LENGTHS_STREAM = 7


def _plain_words(tokenizer: Tokenizer) -> list[str]:
    vocabulary = sorted(
        token
        for token in tokenizer.get_vocab(with_added_tokens=False)
        if token.isascii() and token.isalpha() and len(token) > 1
    )
    if not vocabulary:
        raise ProcessingError("the tokenizer's vocabulary has no plain words to make text from")
    return vocabulary


@functools.lru_cache(maxsize=8)
def _compiled(template: str) -> Any:
    # A sandbox: the template comes from a manifest, which anyone who may register one wrote;
    # it may format text, never reach Python's objects, files or imports.
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        return ImmutableSandboxedEnvironment().from_string(template)
    except TemplateError as exc:
        raise ProcessingError(f"the model's chat template does not parse: {exc}") from None


def render_chat(template: str, text: object, step: ChatTemplateStep) -> str:
    """``text`` as the one user message of a chat, in the model's chat template."""
    from jinja2.exceptions import TemplateError

    if not isinstance(text, str):
        raise ProcessingError(f"chat_template takes text, not a {type(text).__name__}")
    messages = [{"role": "user", "content": text}]
    if step.system is not None:
        messages.insert(0, {"role": "system", "content": step.system})
    try:
        rendered = _compiled(template).render(
            messages=messages, add_generation_prompt=step.add_generation_prompt
        )
    except TemplateError as exc:
        raise ProcessingError(f"the model's chat template failed: {exc}") from None
    return str(rendered)

"""Generative queries: one query is a whole generation, driven step by step through the
framework's ordinary ``predict``.

The model's manifest says which input takes the tokens, which output gives the next token's
scores and which outputs are the key-value cache to feed back (``generation``). A generation
is the prompt's prefill (every prompt token at once, an empty cache), then one decode step per
token: the chosen token in, the cache grown by one position. Greedy by default: the token with
the highest score, the first on ties, the same rule on every framework. The time of each
token is taken as its step returns, before the next step is prepared, and kept in a list: one
clock read and one append per token, nothing else on the timed path.

A graph with an attention mask (``generation.attention_mask``) also generates for a batch of
prompts in one call a step: each prompt padded on the left to the longest, the mask saying
which positions are padding, every row's token chosen by the same rule. A step's time is the
time of every row's token it made; a row that ends (end of sequence) stops being recorded while
the others go on, and the batch ends when every row has.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from services.workers.framework.ports import Generated
from shared.errors import PredictorError
from shared.manifests import Generation, ModelManifest
from shared.messages import Perplexity
from shared.processing.text import left_padded

__all__ = ["PERPLEXITY_TOKENS", "Generator", "perplexity"]

Predict = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


@dataclass
class Generator:
    """Generates from prompts with ``predict``, as ``manifest.generation`` describes."""

    manifest: ModelManifest
    predict: Predict
    max_new_tokens: int
    ignore_eos: bool
    # Sampling: 0 is greedy; above, seeded by ``seed`` and the request's number.
    temperature: float = 0.0
    top_k: int | None = None
    seed: int = 0
    _empty: dict[str, np.ndarray] = field(init=False)
    _outputs: dict[str, int] = field(init=False)
    _requests: Iterator[int] = field(init=False, default_factory=itertools.count)

    def __post_init__(self) -> None:
        spec = self.manifest.generation
        if spec is None:
            raise PredictorError(f"{self.manifest.ref} is not a generative model")
        self._empty = {link.past: self._empty_cache(spec, link.past) for link in spec.cache}
        self._outputs = {o.name: i for i, o in enumerate(self.manifest.outputs)}

    @property
    def spec(self) -> Generation:
        assert self.manifest.generation is not None
        return self.manifest.generation

    def _empty_cache(self, spec: Generation, name: str, rows: int = 1) -> np.ndarray:
        tensor = next(s for s in self.manifest.inputs if s.name == name)
        # The other free dimension is the batch; no position yet.
        shape = [
            0 if axis == spec.cache_axis else (rows if d == -1 else d)
            for axis, d in enumerate(tensor.shape)
        ]
        return np.zeros(shape, dtype=np.dtype(tensor.element_type))

    def empty_cache(self) -> dict[str, np.ndarray]:
        """The cache inputs of a first step: a batch of one, no position yet."""
        return dict(self._empty)

    def prefill(self, prompt: np.ndarray) -> dict[str, np.ndarray]:
        """The inputs of ``prompt``'s first step (int64 [1, n]): the prompt, an empty cache,
        and the mask of its tokens where the graph takes one."""
        feeds = self.empty_cache()
        feeds[self.spec.input_ids] = prompt
        if self.spec.attention_mask is not None:
            feeds[self.spec.attention_mask] = np.ones_like(prompt)
        return feeds

    def _batch_prefill(self, prompts: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        spec = self.spec
        if spec.attention_mask is None:
            raise PredictorError(
                f"{self.manifest.ref} takes one sequence a call (its generation names no "
                "attention_mask): it cannot generate for a batch of prompts"
            )
        ids, mask = left_padded([prompt[0] for prompt in prompts])
        feeds = {link.past: self._empty_cache(spec, link.past, len(prompts)) for link in spec.cache}
        feeds[spec.input_ids] = ids
        feeds[spec.attention_mask] = mask
        return feeds

    @staticmethod
    def _greedy(scores: np.ndarray) -> int:
        # The highest score, the first on ties: the same rule on every framework.
        return int(np.argmax(scores))

    def _sampler(self, number: int) -> Callable[[np.ndarray], int]:
        """Draws for request ``number``: its own generator, seeded by the scenario's seed and
        the number, so a run draws the same tokens again."""
        rng = np.random.default_rng([self.seed, number])
        temperature, top_k = self.temperature, self.top_k

        def sample(scores: np.ndarray) -> int:
            scaled = np.asarray(scores, dtype=np.float64) / temperature
            if top_k is not None and top_k < scaled.size:
                cut = np.partition(scaled, -top_k)[-top_k]
                scaled = np.where(scaled >= cut, scaled, -np.inf)
            weights = np.exp(scaled - np.max(scaled))
            return int(rng.choice(scaled.size, p=weights / weights.sum()))

        return sample

    def generate(
        self,
        prompt: np.ndarray,
        first_token: Callable[[], None] | None = None,
        *,
        length: int | None = None,
    ) -> Generated:
        """Tokens generated from ``prompt`` (int64 [1, n]): at most ``length`` (default
        ``max_new_tokens``), fewer when an end-of-sequence token comes and ``ignore_eos`` is
        off. ``first_token`` is called as the first token is out (LoadGen's
        ``FirstTokenComplete``)."""
        spec = self.spec
        clock = time.perf_counter_ns
        predict, outputs = self.predict, self._outputs
        logits_at = outputs[spec.logits]
        links = [(link.past, outputs[link.present]) for link in spec.cache]
        masked = spec.attention_mask
        stops = () if self.ignore_eos else tuple(spec.eos_token_ids)
        feeds = self.prefill(prompt)
        positions = int(prompt.shape[1])
        tokens: list[int] = []
        token_ns: list[int] = []
        stopped_by = "max_new_tokens"
        choose = self._greedy if self.temperature == 0 else self._sampler(next(self._requests))
        issued = clock()
        for _ in range(self.max_new_tokens if length is None else length):
            result = predict(feeds)
            token = choose(result[logits_at][0])
            token_ns.append(clock())
            tokens.append(token)
            if first_token is not None:
                first_token()
                first_token = None
            if token in stops:
                stopped_by = "eos"
                break
            feeds = {past: result[at] for past, at in links}
            feeds[spec.input_ids] = np.asarray([[token]], dtype=prompt.dtype)
            if masked is not None:
                positions += 1
                feeds[masked] = np.ones((1, positions), dtype=np.int64)
        return Generated(issued, int(prompt.shape[1]), tokens, token_ns, stopped_by)

    def generate_batch(
        self, prompts: Sequence[np.ndarray], lengths: Sequence[int] | None = None
    ) -> list[Generated]:
        """``generate`` for several prompts in one call a step (the graph must take an
        attention mask): each prompt's tokens and their times, in the prompts' order, each at
        most its ``lengths`` (default ``max_new_tokens``). Every row is issued at once; each
        step's time is that of every token it made."""
        if len(prompts) == 1:
            return [self.generate(prompts[0], length=None if lengths is None else lengths[0])]
        longest = [self.max_new_tokens] * len(prompts) if lengths is None else list(lengths)
        spec = self.spec
        clock = time.perf_counter_ns
        predict, outputs = self.predict, self._outputs
        logits_at = outputs[spec.logits]
        links = [(link.past, outputs[link.present]) for link in spec.cache]
        stops = frozenset(() if self.ignore_eos else spec.eos_token_ids)
        feeds = self._batch_prefill(prompts)
        assert spec.attention_mask is not None
        mask = feeds[spec.attention_mask]
        rows = len(prompts)
        tokens: list[list[int]] = [[] for _ in range(rows)]
        token_ns: list[list[int]] = [[] for _ in range(rows)]
        stopped_by = ["max_new_tokens"] * rows
        live = list(range(rows))
        if self.temperature == 0:
            choose: Callable[[np.ndarray], list[int]] = _greedy_rows
        else:
            samplers = [self._sampler(next(self._requests)) for _ in range(rows)]

            def choose(scores: np.ndarray) -> list[int]:
                return [draw(row) for draw, row in zip(samplers, scores, strict=True)]

        issued = clock()
        for step in range(max(longest)):
            result = predict(feeds)
            chosen = choose(result[logits_at])
            now = clock()
            for row in live:
                tokens[row].append(chosen[row])
                token_ns[row].append(now)
            ended = {row for row in live if chosen[row] in stops}
            for row in ended:
                stopped_by[row] = "eos"
            # A row at its own length is done (its stop is max_new_tokens, as set).
            live = [row for row in live if row not in ended and step + 1 < longest[row]]
            if not live:
                break
            feeds = {past: result[at] for past, at in links}
            # A row that ended still takes a step (the batch's shape is fixed); its tokens are
            # no longer recorded.
            feeds[spec.input_ids] = np.asarray(chosen, dtype=prompts[0].dtype).reshape(rows, 1)
            mask = np.concatenate([mask, np.ones((rows, 1), dtype=mask.dtype)], axis=1)
            feeds[spec.attention_mask] = mask
        return [
            Generated(issued, int(prompt.shape[1]), tokens[row], token_ns[row], stopped_by[row])
            for row, prompt in enumerate(prompts)
        ]


def _greedy_rows(scores: np.ndarray) -> list[int]:
    # Each row's highest score, the first on ties: the rule of ``Generator._greedy``.
    chosen: list[int] = np.argmax(scores, axis=-1).tolist()
    return chosen


# Perplexity predicts at most this many tokens of a data set: enough for a stable figure, and
# a bounded time (one decode step each) whatever the data set's size.
PERPLEXITY_TOKENS = 512


def perplexity(
    generator: Generator, texts: Sequence[np.ndarray], *, dataset: str, split: str | None
) -> Perplexity:
    """Teacher-forced perplexity over ``texts`` (token ids, [1, n] each): each text's first
    token with an empty cache, then one step per token, scoring the next one."""
    spec = generator.spec
    predict = generator.predict
    outputs = {o.name: i for i, o in enumerate(generator.manifest.outputs)}
    logits_at = outputs[spec.logits]
    links = [(link.past, outputs[link.present]) for link in spec.cache]
    total = 0.0
    predicted = used = 0
    for ids in texts:
        tokens = ids[0]
        if len(tokens) < 2 or predicted >= PERPLEXITY_TOKENS:
            continue
        used += 1
        feeds = generator.empty_cache()
        for position in range(len(tokens) - 1):
            feeds[spec.input_ids] = tokens[position : position + 1].reshape(1, 1)
            if spec.attention_mask is not None:
                feeds[spec.attention_mask] = np.ones((1, position + 1), dtype=np.int64)
            result = predict(feeds)
            scores = np.asarray(result[logits_at][0], dtype=np.float64)
            top = float(np.max(scores))
            log_total = top + float(np.log(np.sum(np.exp(scores - top))))
            total += log_total - scores[int(tokens[position + 1])]
            predicted += 1
            if predicted >= PERPLEXITY_TOKENS:
                break
            feeds = {past: result[at] for past, at in links}
    if predicted == 0:
        raise PredictorError(f"{dataset}: no text of two tokens or more to score perplexity on")
    return Perplexity(
        perplexity=float(np.exp(total / predicted)),
        tokens=predicted,
        texts=used,
        dataset=dataset,
        split=split,
    )

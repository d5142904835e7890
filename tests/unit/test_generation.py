"""Generative queries: the manifest's generation section, the generation loop, and the token
metrics as their definitions say."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from services.analyzer.figures import TIMELINE_POINTS, TIMELINES
from services.analyzer.figures import tokens as token_figures
from services.workers.framework.generator import Generator, perplexity
from services.workers.framework.generator import generation_pass as _generation_pass
from services.workers.framework.generator.backend import _check_vocabulary
from services.workers.framework.ports import Generated
from services.workers.framework.profiling import trace
from services.workers.framework.sessions.generation import GENERATION_WARMUP, generation_plan
from services.workers.framework.sessions.prompts import check_context
from services.workers.framework.sessions.prompts import prompt_ids as prompts
from services.workers.framework.sessions.tokens import record
from shared.errors import PredictorError, ProcessingError
from shared.manifests import ChatTemplateStep, ModelManifest
from shared.measurement import MultiStream, Offline, SingleStream, WarmupSettings
from shared.measurement.generation import judge_tokens, summarize_generation
from shared.measurement.streams import run_streams
from shared.messages import (
    GeneratedRequest,
    GenerationRecord,
    ReasonCode,
    Scenario,
    Severity,
)
from shared.processing.text import load_tokenizer, render_chat
from tests.unit.test_text_inputs import TOKENIZER as MINILM_TOKENIZER

VOCABULARY = 10
EOS = 9
CACHE = [2, -1, 1, -1, 4]


def _document(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": "tiny-lm",
        "version": "1.0.0",
        "task": "text-generation",
        "framework": {"name": "onnxruntime"},
        "tokenizer": {"uri": "/models/tokenizer.json", "sha256": "1" * 64},
        "inputs": [
            {
                "name": "ids",
                "element_type": "int64",
                "shape": [-1, -1],
                "steps": [{"op": "tokenize", "max_length": 64}],
            },
            {"name": "past", "shape": CACHE},
        ],
        "outputs": [
            {"name": "logits", "shape": [-1, VOCABULARY]},
            {"name": "present", "shape": CACHE},
        ],
        "generation": {
            "input_ids": "ids",
            "logits": "logits",
            "cache": [{"past": "past", "present": "present"}],
            "cache_axis": 3,
            "context_length": 16,
            "eos_token_ids": [EOS],
        },
        "source": {"uri": "/models/tiny.onnx", "sha256": "0" * 64},
    }
    document.update(changes)
    return document


MANIFEST = ModelManifest.model_validate(_document())


class CountingModel:
    """Predicts (last token + 1) % vocabulary; its cache holds one position per token seen,
    so a generation that forgets to feed the cache back, or feeds the wrong one, shows."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []  # (new tokens, cached positions) per step

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        ids, past = feeds["ids"], feeds["past"]
        self.calls.append((ids.shape[1], past.shape[3]))
        logits = np.zeros((1, VOCABULARY), dtype=np.float32)
        logits[0, (int(ids[0, -1]) + 1) % VOCABULARY] = 1.0
        grown = np.concatenate([past, np.ones((2, 1, 1, ids.shape[1], 4), np.float32)], axis=3)
        return [logits, grown]


def test_a_generation_is_a_prefill_then_one_decode_step_per_token() -> None:
    model = CountingModel()
    generator = Generator(MANIFEST, model, max_new_tokens=4, ignore_eos=True)
    generated = generator.generate(np.asarray([[3, 4, 5]], dtype=np.int64))
    assert generated.tokens == [6, 7, 8, 9]
    assert model.calls == [(3, 0), (1, 3), (1, 4), (1, 5)]
    assert generated.prompt_tokens == 3
    assert len(generated.token_ns) == 4
    assert generated.token_ns == sorted(generated.token_ns)
    assert generated.issued_ns <= generated.token_ns[0]


def test_the_first_token_is_announced_once_as_it_is_out() -> None:
    model = CountingModel()
    announced: list[int] = []
    generator = Generator(MANIFEST, model, max_new_tokens=4, ignore_eos=True)
    prompt = np.asarray([[3]], dtype=np.int64)
    generator.generate(prompt, lambda: announced.append(len(model.calls)))
    assert announced == [1], "after the prefill, before the first decode step"


def test_a_traced_generation_shows_its_prefill_and_each_decode_step() -> None:
    model = CountingModel()
    generator = Generator(MANIFEST, model, max_new_tokens=4, ignore_eos=True)
    prompt = np.asarray([[3, 4]], dtype=np.int64)
    prefill = {**generator.empty_cache(), "ids": prompt}
    before = time.time_ns()
    tracing = trace(
        SimpleNamespace(predict=model, framework="fake"),  # type: ignore[arg-type]
        "model",
        queries=2,
        inputs=prefill,
        make_inputs=lambda: dict(prefill),
        postprocess=list,
        on_step=lambda _: None,
        model_pass=lambda queries: _generation_pass(generator, prompt, queries),
    )
    (model_pass,) = tracing.passes
    assert len(model_pass.queries) == 2
    for query in model_pass.queries:
        assert [step.name for step in query.steps] == ["prefill", "decode", "decode", "decode"]
        # On the wall clock, back to back: each step begins where the last one ended.
        assert before <= query.start_ns == query.steps[0].start_ns
        for earlier, later in zip(query.steps, query.steps[1:], strict=False):
            assert earlier.end_ns == later.start_ns
        assert query.end_ns == query.steps[-1].end_ns <= time.time_ns()
    (outcome,) = [o for o in tracing.outcomes if o.level == "model"]
    assert outcome.captured
    assert outcome.traced_p50_ns is not None
    assert outcome.traced_p50_ns > 0


def test_pinned_output_ignores_the_end_of_sequence_and_natural_output_stops_there() -> None:
    prompt = np.asarray([[7]], dtype=np.int64)
    pinned = Generator(MANIFEST, CountingModel(), max_new_tokens=5, ignore_eos=True)
    assert pinned.generate(prompt).tokens == [8, 9, 0, 1, 2]
    natural = Generator(MANIFEST, CountingModel(), max_new_tokens=5, ignore_eos=False)
    stopped = natural.generate(prompt)
    assert stopped.tokens == [8, 9]
    assert stopped.stopped_by == "eos"


def test_a_prompt_that_leaves_no_room_in_the_context_is_refused_with_both_lengths() -> None:
    check_context(MANIFEST, 8, max_new_tokens=8)
    with pytest.raises(PredictorError, match=r"prompt of 9 tokens \+ max_new_tokens 8 exceeds"):
        check_context(MANIFEST, 9, max_new_tokens=8)


def test_the_empty_cache_is_a_batch_of_one_with_no_position() -> None:
    generator = Generator(MANIFEST, CountingModel(), max_new_tokens=1, ignore_eos=True)
    assert generator.empty_cache()["past"].shape == (2, 1, 1, 0, 4)


def _error(document: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        ModelManifest.model_validate(document)
    return str(caught.value)


def test_text_generation_needs_its_generation_section() -> None:
    document = _document()
    del document["generation"]
    assert "task text-generation needs generation:" in _error(document)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"logits": "scores"}, "generation.logits: 'scores' is not one of the model's outputs"),
        ({"input_ids": "tokens"}, "generation.input_ids: 'tokens' is not one of the model's"),
        (
            {"cache": [{"past": "past", "present": "later"}]},
            "generation.cache.0.present: 'later' is not one of the model's outputs",
        ),
        ({"cache_axis": 2}, "axis 2 (cache_axis) must be -1: the cache grows"),
        ({"context_length": 0}, "context_length"),
    ],
)
def test_a_generation_section_naming_what_the_model_lacks_is_refused(
    change: dict[str, Any], expected: str
) -> None:
    document = _document()
    document["generation"] = {**document["generation"], **change}
    assert expected in _error(document)


def test_max_new_tokens_of_zero_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="max_new_tokens"):
        Scenario(max_new_tokens=0)


def _request(scheduled: int, issued: int, tokens: list[int], prompt: int = 5) -> GeneratedRequest:
    return GeneratedRequest(
        scheduled_ns=scheduled,
        issued_ns=issued,
        token_ns=tokens,
        input_tokens=prompt,
        stopped_by="max_new_tokens",
    )


def test_the_token_metrics_follow_their_definitions() -> None:
    ms = 1_000_000
    measured = GenerationRecord(
        max_new_tokens=4,
        ignore_eos=True,
        duration_ns=1000 * ms,
        requests=[
            # Scheduled at 0, issued 10 ms late (it waited): TTFT counts the wait.
            _request(0, 10 * ms, [50 * ms, 60 * ms, 80 * ms, 110 * ms]),
            _request(200 * ms, 200 * ms, [230 * ms, 240 * ms, 250 * ms, 260 * ms], prompt=7),
            # One token only: no time per output token, and no gap.
            _request(500 * ms, 500 * ms, [520 * ms]),
        ],
    )
    summary = summarize_generation(measured)
    assert summary.requests == 3
    assert summary.ttft.count == 3
    assert summary.ttft.mean_ns == pytest.approx((50 + 30 + 20) / 3 * ms)
    assert summary.e2e.mean_ns == pytest.approx((110 + 60 + 20) / 3 * ms)
    # TPOT = (E2E - TTFT) / (tokens - 1): (110 - 50) / 3 = 20 ms and (60 - 30) / 3 = 10 ms.
    assert summary.tpot is not None
    assert summary.tpot.count == 2
    assert sorted([summary.tpot.min_ns, summary.tpot.max_ns]) == [10 * ms, 20 * ms]
    # ITL pools every gap: 10, 20, 30 and 10, 10, 10 ms.
    assert summary.itl is not None
    assert summary.itl.count == 6
    assert summary.itl.mean_ns == pytest.approx(15 * ms)
    assert summary.output_tokens_per_s == pytest.approx(9.0)
    assert summary.requests_per_s == pytest.approx(3.0)
    assert summary.input_tokens_mean == pytest.approx(17 / 3)
    assert set(summary.definitions) >= {"ttft", "tpot", "itl", "e2e"}


def test_recorded_times_start_at_the_timed_phase() -> None:
    generator = Generator(MANIFEST, CountingModel(), max_new_tokens=2, ignore_eos=True)
    generated = [generator.generate(np.asarray([[1]], dtype=np.int64)) for _ in range(2)]
    begin = generated[0].issued_ns
    measured = record(
        generated,
        scheduled_ns=None,
        begin_ns=begin,
        duration_ns=generated[-1].token_ns[-1] - begin,
        max_new_tokens=2,
        ignore_eos=True,
    )
    first, second = measured.requests
    assert first.scheduled_ns == first.issued_ns == 0
    assert second.scheduled_ns == second.issued_ns > first.token_ns[-1] - 1
    assert [r.output_tokens for r in measured.requests] == [2, 2]


def _timed(count: int, ttft_ms: float, tpot_ms: float) -> GenerationRecord:
    ms = 1_000_000
    requests = [
        _request(
            i * 1000 * ms,
            i * 1000 * ms,
            [int(i * 1000 * ms + ttft_ms * ms + k * tpot_ms * ms) for k in range(3)],
        )
        for i in range(count)
    ]
    return GenerationRecord(
        max_new_tokens=3, ignore_eos=True, duration_ns=count * 1000 * ms, requests=requests
    )


def test_token_bounds_judge_the_p99_ttft_and_tpot() -> None:
    bounds = Scenario(name="server", ttft_bound_ms=100, tpot_bound_ms=20)
    missed = judge_tokens(summarize_generation(_timed(10, 150, 10)), bounds)
    assert [(r.code, r.severity) for r in missed] == [
        (ReasonCode.TTFT_BOUND_MISSED, Severity.ERROR),
        (ReasonCode.TOKEN_BOUND_UNPROVEN, Severity.WARNING),  # TPOT within, from 10 values
    ]
    assert missed[0].measured == pytest.approx(150)
    assert missed[0].limit == 100
    met = judge_tokens(summarize_generation(_timed(700, 50, 10)), bounds)
    assert met == []
    assert judge_tokens(summarize_generation(_timed(10, 150, 10)), Scenario()) == []


def test_token_figures_are_bounded_and_start_at_the_scheduled_time() -> None:
    ms = 1_000_000
    long_requests = [
        _request(i * ms, i * ms, [i * ms + 50 * ms + k * 10 * ms for k in range(1000)])
        for i in range(60)
    ]
    drawn = token_figures(
        GenerationRecord(
            max_new_tokens=1000, ignore_eos=True, duration_ns=20_000 * ms, requests=long_requests
        )
    )
    assert len(drawn.timelines) == TIMELINES
    first = drawn.timelines[0]
    assert len(first.ms) <= TIMELINE_POINTS
    assert first.tokens[0] == 1
    assert first.ms[0] == pytest.approx(50.0)  # the TTFT
    assert first.tokens[-1] == 1000  # the last token is always kept
    assert drawn.ttft[-1].fraction == 1.0
    assert drawn.tpot[0].latency_ms == pytest.approx(10.0)
    assert drawn.itl[-1].latency_ms == pytest.approx(10.0)


def test_a_tokenizer_with_more_tokens_than_the_model_scores_is_refused() -> None:
    job = SimpleNamespace(manifest=MANIFEST)
    _check_vocabulary(job, VOCABULARY)  # the model's own: fine
    with pytest.raises(PredictorError, match=r"its tokenizer has 49152 tokens but output 'logits'"):
        _check_vocabulary(job, 49152)


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _chat_document(template: str | None) -> dict[str, Any]:
    document = _document()
    document["inputs"][0]["steps"] = [
        {"op": "chat_template", "system": "Be brief."},
        {"op": "tokenize", "max_length": 64},
    ]
    document["generation"] = {**document["generation"], "chat_template": template}
    return document


def test_a_chat_template_step_on_a_model_without_one_is_refused_naming_the_field() -> None:
    assert "inputs.0.steps.0: chat_template formats a prompt with the model's " in _error(
        _chat_document(None)
    )


def test_chat_template_comes_just_before_tokenize() -> None:
    document = _chat_document(CHATML)
    document["inputs"][0]["steps"] = [
        {"op": "tokenize", "max_length": 64},
        {"op": "chat_template"},
    ]
    assert "chat_template comes first, just before tokenize" in _error(document)


def test_a_prompt_is_formatted_as_the_models_chat_then_tokenized() -> None:
    manifest = ModelManifest.model_validate(_chat_document(CHATML))
    step = manifest.inputs[0].steps[0]
    assert isinstance(step, ChatTemplateStep)
    assert render_chat(CHATML, "Hi there", step) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    tokenizer = load_tokenizer(str(MINILM_TOKENIZER))
    (ids,) = prompts(manifest, ["Hi there"], tokenizer)
    plain = tokenizer.encode("Hi there").ids
    assert ids.shape[1] > len(plain), "the chat's roles and markers are tokens too"


def test_a_chat_template_cannot_reach_out_of_its_sandbox() -> None:
    hostile = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(ProcessingError, match="chat template failed"):
        render_chat(hostile, "hi", ChatTemplateStep())


def test_concurrent_streams_overlap_and_every_finished_request_counts() -> None:
    active = 0
    most = 0
    lock = threading.Lock()

    def slow(prompt: int) -> Generated:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        issued = time.perf_counter_ns()
        tokens = []
        for _ in range(3):
            time.sleep(0.002)
            tokens.append(time.perf_counter_ns())
        with lock:
            active -= 1
        return Generated(issued, 4, [prompt] * 3, tokens, "max_new_tokens")

    plan = SingleStream(min_query_count=30, min_duration_s=0, warmup=WarmupSettings(max_windows=0))
    result, timed, failed = run_streams(
        plan, 3, slow, prompts=8, load_ns=0, on_step=lambda step: None, watch=None
    )
    (phase,) = result.phases
    assert most == 3, "three requests in flight at once"
    assert failed == []
    assert len(timed) == len(phase.latencies_ns) >= 30
    assert len(timed) <= 30 + 2, "only the requests already begun finish after the stop"
    completions = [g.token_ns[-1] for g in timed]
    assert completions == sorted(completions)
    assert phase.duration_ns > 0
    assert {g.tokens[0] for g in timed} <= set(range(8))


def test_perplexity_is_the_exponent_of_the_mean_negative_log_likelihood() -> None:
    # The counting model gives the token after t a score of 1 and every other 0: the right
    # guess has probability e / (e + 9), any other 1 / (e + 9).
    generator = Generator(MANIFEST, CountingModel(), max_new_tokens=1, ignore_eos=True)
    texts = [np.asarray([[3, 4, 5]]), np.asarray([[1, 7]]), np.asarray([[2]])]
    scored = perplexity(generator, texts, dataset="texts@1.0.0", split=None)
    e = np.e
    nll = [-np.log(e / (e + 9)), -np.log(e / (e + 9)), -np.log(1 / (e + 9))]
    assert scored.perplexity == pytest.approx(np.exp(np.mean(nll)))
    assert (scored.tokens, scored.texts) == (3, 2)  # a one-token text predicts nothing


def test_perplexity_of_texts_too_short_to_score_is_refused() -> None:
    generator = Generator(MANIFEST, CountingModel(), max_new_tokens=1, ignore_eos=True)
    with pytest.raises(PredictorError, match="no text of two tokens or more"):
        perplexity(generator, [np.asarray([[2]])], dataset="texts@1.0.0", split=None)


class FlatModel(CountingModel):
    """Every token equally likely: what a sampler draws is its seed's, nothing else."""

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        logits, grown = super().__call__(feeds)
        return [np.zeros_like(logits), grown]


def _sampled(seed: int, *, top_k: int | None = None, model: Any = None) -> list[list[int]]:
    generator = Generator(
        MANIFEST,
        model or FlatModel(),
        max_new_tokens=12,
        ignore_eos=True,
        temperature=1.0,
        top_k=top_k,
        seed=seed,
    )
    prompt = np.asarray([[1]], dtype=np.int64)
    return [generator.generate(prompt).tokens for _ in range(2)]


def test_sampling_is_seeded_per_request() -> None:
    first, second = _sampled(7)
    assert first != second, "each request draws from its own stream"
    assert _sampled(7) == [first, second], "the same seed draws the same tokens again"
    assert _sampled(8) != [first, second]
    assert len(set(first + second)) > 3


def test_top_k_of_one_is_greedy() -> None:
    greedy = Generator(MANIFEST, CountingModel(), max_new_tokens=12, ignore_eos=True)
    expected = greedy.generate(np.asarray([[1]], dtype=np.int64)).tokens
    assert _sampled(3, top_k=1, model=CountingModel()) == [expected, expected]


def test_top_k_without_sampling_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="top_k: it applies when sampling"):
        Scenario(top_k=5)


def _job(**scenario: Any) -> Any:
    return SimpleNamespace(manifest=MANIFEST, scenario=Scenario(**scenario))


@pytest.mark.parametrize(
    ("scenario", "where", "said"),
    [
        ({"name": "offline", "batch_size": 4}, {}, "names no attention_mask"),
        ({"name": "offline"}, {"served": True}, "runs the single-stream and server scenarios"),
        (
            {"name": "offline", "driver": "loadgen"},
            {},
            "dlscope's driver",
        ),
        ({"driver": "loadgen"}, {"served": True}, "LoadGen's driver runs in-process models"),
        ({"driver": "loadgen", "concurrency": 2}, {}, "one generation at a time"),
        ({"name": "multi-stream"}, {}, "names no attention_mask"),
        ({"name": "multi-stream"}, {"served": True}, "(asked: multi-stream"),
        ({"name": "batch-sweep"}, {}, "(asked: batch-sweep"),
        ({"concurrency": 257}, {}, "at most 256 streams (asked: 257); a served model takes up to"),
    ],
)
def test_a_generation_refuses_the_scenarios_it_cannot_run_saying_why(
    scenario: dict[str, Any], where: dict[str, bool], said: str
) -> None:
    with pytest.raises(PredictorError) as refused:
        generation_plan(_job(**scenario), **where)
    assert said in str(refused.value)


def test_a_served_model_takes_thousands_of_streams() -> None:
    plan = generation_plan(_job(concurrency=4096), served=True)
    assert plan.name == "single-stream"
    with pytest.raises(ValidationError, match="less than or equal to 4096"):
        Scenario(concurrency=4097)


def test_an_offline_generation_is_one_prompt_a_query_with_short_warmup_windows() -> None:
    plan = generation_plan(_job(name="offline", iterations=8))
    assert isinstance(plan, Offline)
    assert (plan.batch_size, plan.min_sample_count) == (1, 8)
    assert plan.warmup.window_queries == GENERATION_WARMUP


MASKED = ModelManifest.model_validate(
    _document(
        inputs=[
            *_document()["inputs"],
            {
                "name": "mask",
                "element_type": "int64",
                "shape": [-1, -1],
                "steps": [{"op": "tokenize", "take": "attention_mask", "max_length": 64}],
            },
        ],
        generation={**_document()["generation"], "attention_mask": "mask"},
    )
)


class MaskedModel:
    """``CountingModel`` for a batch: each row predicts (its last token + 1) % vocabulary, and
    the mask must cover every position so far (cached and new), a row's padding on its left."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []  # (rows, new tokens, cached positions)

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        ids, past, mask = feeds["ids"], feeds["past"], feeds["mask"]
        rows, new = ids.shape
        assert past.shape[1] == rows == mask.shape[0]
        assert mask.shape[1] == past.shape[3] + new, "the mask covers every position so far"
        for row in mask:  # padding only on the left: once a token, tokens to the end
            assert list(row) == sorted(row)
        self.calls.append((rows, new, past.shape[3]))
        logits = np.zeros((rows, VOCABULARY), dtype=np.float32)
        logits[np.arange(rows), (ids[:, -1] + 1) % VOCABULARY] = 1.0
        grown = np.concatenate([past, np.ones((2, rows, 1, new, 4), np.float32)], axis=3)
        return [logits, grown]


def test_a_batch_of_prompts_gives_each_the_tokens_it_gets_alone() -> None:
    model = MaskedModel()
    generator = Generator(MASKED, model, max_new_tokens=3, ignore_eos=True)
    asked = [np.asarray([ids], dtype=np.int64) for ids in ([3, 4, 5], [1], [6, 7])]
    together = generator.generate_batch(asked)
    alone = [generator.generate(prompt).tokens for prompt in asked]
    assert [g.tokens for g in together] == alone == [[6, 7, 8], [2, 3, 4], [8, 9, 0]]
    assert model.calls[:3] == [(3, 3, 0), (3, 1, 3), (3, 1, 4)], "one call a step for the batch"
    assert [g.prompt_tokens for g in together] == [3, 1, 2]
    # Every row is issued at once, and a step's time is that of each row's token it made.
    assert len({g.issued_ns for g in together}) == 1
    assert together[0].token_ns == together[1].token_ns == together[2].token_ns


def test_a_row_that_ends_stops_being_recorded_while_the_others_go_on() -> None:
    generator = Generator(MASKED, MaskedModel(), max_new_tokens=4, ignore_eos=False)
    asked = [np.asarray([[7]], dtype=np.int64), np.asarray([[1, 2]], dtype=np.int64)]
    first, second = generator.generate_batch(asked)
    assert (first.tokens, first.stopped_by) == ([8, EOS], "eos")
    assert (second.tokens, second.stopped_by) == ([3, 4, 5, 6], "max_new_tokens")
    assert first.token_ns == second.token_ns[:2]


def test_a_graph_without_an_attention_mask_takes_no_batch() -> None:
    generator = Generator(MANIFEST, CountingModel(), max_new_tokens=2, ignore_eos=True)
    asked = [np.asarray([[1]], dtype=np.int64), np.asarray([[2, 3]], dtype=np.int64)]
    with pytest.raises(PredictorError, match="names no attention_mask"):
        generator.generate_batch(asked)


def test_offline_and_multi_stream_generations_batch_where_the_graph_takes_a_mask() -> None:
    job = SimpleNamespace(manifest=MASKED, scenario=Scenario(name="offline", batch_size=4))
    plan = generation_plan(job)  # type: ignore[arg-type]
    assert isinstance(plan, Offline)
    assert plan.batch_size == 4
    job = SimpleNamespace(
        manifest=MASKED, scenario=Scenario(name="multi-stream", samples_per_query=3)
    )
    multi = generation_plan(job)  # type: ignore[arg-type]
    assert isinstance(multi, MultiStream)
    assert multi.samples_per_query == 3
    job.scenario = Scenario(name="multi-stream", samples_per_query=3, driver="loadgen")
    with pytest.raises(PredictorError, match="multi-stream generation runs on dlscope's driver"):
        generation_plan(job)  # type: ignore[arg-type]


def test_each_prompt_generates_its_own_length_alone_and_in_a_batch() -> None:
    # A drawn workload: every request pinned at its own row's length, wherever it runs.
    generator = Generator(MASKED, MaskedModel(), max_new_tokens=2, ignore_eos=True)
    asked = [np.asarray([ids], dtype=np.int64) for ids in ([3, 4, 5], [1], [6, 7])]
    lengths = [4, 1, 3]
    together = generator.generate_batch(asked, lengths)
    alone = [generator.generate(p, length=n).tokens for p, n in zip(asked, lengths, strict=True)]
    assert [g.tokens for g in together] == alone == [[6, 7, 8, 9], [2], [8, 9, 0]]
    assert [g.stopped_by for g in together] == ["max_new_tokens"] * 3
    assert [len(g.token_ns) for g in together] == lengths
    # Without lengths, max_new_tokens bounds each, as before.
    assert [len(g.tokens) for g in generator.generate_batch(asked)] == [2, 2, 2]

"""A served model's answer is bounded as it is read: past its bytes, chunks or text for the
tokens asked, or one line over the bound, it is ``oversized``; past its time, ``overlong``;
each a failure of its own kind, with what came before kept."""

from __future__ import annotations

import time

import orjson

from services.workers.framework.endpoint.wire import MAX_LINE_BYTES, Limits, Reading, Streamed


def reading(max_tokens: int = 4, total_s: float = 60.0) -> Reading:
    return Reading(time.perf_counter_ns(), None, Limits(max_tokens, total_s))


def event(text: str) -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"index": 0, "text": text}]}) + b"\n\n"


def fed(answer: Reading, blocks: list[bytes]) -> Streamed | None:
    for block in blocks:
        if (done := answer.block("completions", block)) is not None:
            return done
    return None


def test_an_answer_within_its_bounds_reads_across_blocks_split_anywhere() -> None:
    body = event("tok") * 3 + b'data: {"choices":[{"text":"tok","finish_reason":"length"}]}\n\n'
    body += b"data: [DONE]\n\n"
    blocks = [body[i : i + 7] for i in range(0, len(body), 7)]  # lines cut mid-way
    done = fed(reading(), blocks)
    assert done is not None
    assert done.ok
    assert done.text == "tok" * 4
    assert len(done.chunk_ns) == 4


def test_more_chunks_than_the_tokens_asked_could_make_is_oversized() -> None:
    limits = Limits(4, 60.0)
    done = fed(reading(), [event("t")] * (limits.max_chunks + 1))
    assert done is not None
    assert done.failure == "oversized"
    assert f"over {limits.max_chunks} chunks" in str(done.cause)
    assert len(done.chunk_ns) == limits.max_chunks + 1  # what came is kept


def test_too_much_text_too_many_bytes_or_one_huge_line_is_oversized() -> None:
    limits = Limits(4, 60.0)
    text = fed(reading(), [event("x" * (limits.max_chars + 1))])
    assert text is not None
    assert text.failure == "oversized"
    assert "characters of text" in str(text.cause)
    # Keep-alive comments carry no token: only their bytes bound them.
    comments = fed(reading(), [b": keep-alive\n\n" * 1000] * 100)
    assert comments is not None
    assert comments.failure == "oversized"
    assert f"over {limits.max_bytes} bytes" in str(comments.cause)
    line = fed(reading(max_tokens=4096), [b"data: " + b"x" * (MAX_LINE_BYTES + 1)])
    assert line is not None
    assert line.failure == "oversized"
    assert "an event line over" in str(line.cause)


def test_an_answer_still_coming_past_its_time_is_overlong() -> None:
    answer = reading(total_s=0.05)
    assert answer.block("completions", b"da") is None
    time.sleep(0.06)
    done = answer.block("completions", b"t")
    assert done is not None
    assert done.failure == "overlong"
    assert "still answering after 0.05 s" in str(done.cause)


def test_a_last_line_without_its_newline_is_read_at_the_streams_end() -> None:
    answer = reading()
    assert (
        answer.block("completions", b'data: {"choices":[{"text":"a","finish_reason":"stop"}]}')
        is None
    )
    done = answer.read_to_its_end("completions")
    assert done.ok
    assert done.text == "a"
    assert done.finish_reason == "stop"

"""Topic matching as RabbitMQ documents it (https://www.rabbitmq.com/tutorials/tutorial-five-python):
words are separated by dots, ``*`` stands for exactly one word, ``#`` for zero or more words.
The contract suite checks the same semantics against the real broker."""

from __future__ import annotations

import pytest

from shared.messaging.topics import topic_matches

CASES = [
    # The tutorial's own examples: bindings "*.orange.*", "*.*.rabbit" and "lazy.#".
    ("*.orange.*", "quick.orange.rabbit", True),
    ("*.*.rabbit", "quick.orange.rabbit", True),
    ("*.orange.*", "lazy.orange.elephant", True),
    ("lazy.#", "lazy.orange.elephant", True),
    ("*.orange.*", "quick.orange.fox", True),
    ("*.*.rabbit", "quick.orange.fox", False),
    ("lazy.#", "lazy.brown.fox", True),
    ("lazy.#", "lazy.pink.rabbit", True),
    ("*.*.rabbit", "quick.brown.fox", False),
    ("*.orange.*", "orange", False),
    ("*.orange.*", "quick.orange.new.rabbit", False),
    ("lazy.#", "lazy.orange.new.rabbit", True),
    # '#' matches zero words, one, or many; anywhere in the pattern.
    ("a.#", "a", True),
    ("a.#", "a.b", True),
    ("a.#", "a.b.c.d", True),
    ("a.#", "b.a", False),
    ("a.#", "ab", False),
    ("#.c", "c", True),
    ("#.c", "a.b.c", True),
    ("#.c", "c.a", False),
    ("a.#.z", "a.z", True),
    ("a.#.z", "a.b.c.z", True),
    ("a.#.z", "a.b.c", False),
    ("#", "anything.at.all", True),
    ("#.#", "a.b", True),
    # '*' matches exactly one word, never zero and never two.
    ("a.*", "a.b", True),
    ("a.*", "a", False),
    ("a.*", "a.b.c", False),
    ("*", "a", True),
    ("*", "a.b", False),
    ("*.b.*", "x.b.y", True),
    ("*.b.*", "a.b", False),
    ("*.#", "a", True),
    ("*.#", "", False),
    ("#.*", "a.b.c", True),
    # No wildcard: the whole key must be equal, word for word.
    ("a.b", "a.b", True),
    ("a.b", "a.b.c", False),
    ("a.b", "a", False),
    ("a.b", "a.c", False),
    ("job.onnxruntime.cpu", "job.onnxruntime.cpu", True),
    # Wildcards only count as whole words: inside a word they are ordinary characters.
    ("a*.b", "ab.b", False),
    ("a#", "a.b", False),
    # The empty key has no words at all; an empty word between dots is still a word.
    ("*", "", False),
    ("#", "", True),
    ("#.*", "", False),
    ("", "", True),
    ("", "a", False),
    ("a.*", "a.", True),
    ("*.a", ".a", True),
    # dlscope's own keys: jobs for any agent of a kind, or for one agent.
    ("job.onnxruntime.cpu.#", "job.onnxruntime.cpu", True),
    ("job.onnxruntime.cpu.#", "job.onnxruntime.cpu.agent-7", True),
    ("job.onnxruntime.cpu.#", "job.onnxruntime.gpu.agent-7", False),
    ("evaluation.*", "evaluation.completed", True),
]


@pytest.mark.parametrize(("pattern", "routing_key", "expected"), CASES)
def test_topic_matches(pattern: str, routing_key: str, expected: bool) -> None:
    assert topic_matches(pattern, routing_key) is expected

"""RabbitMQ topic matching: words separated by '.', '*' is one word, '#' zero or more."""

from __future__ import annotations

from functools import lru_cache

__all__ = ["topic_matches"]


def topic_matches(pattern: str, routing_key: str) -> bool:
    return _match(_words(pattern), _words(routing_key))


def _words(key: str) -> tuple[str, ...]:
    # As RabbitMQ splits them: the empty key has no words (so '*' does not match it).
    return tuple(key.split(".")) if key else ()


@lru_cache(maxsize=4096)
def _match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        # '#' swallows zero words, or one word and stays in play.
        return _match(rest, words) or (bool(words) and _match(pattern, words[1:]))
    if not words:
        return False
    return (head == "*" or head == words[0]) and _match(rest, words[1:])

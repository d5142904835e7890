"""Fuzzing the two parsers that take input from anyone: manifests (YAML or JSON, from a file,
an HTTP body or a message) and envelopes (any AMQP message body).

Whatever the input, each either gives its typed value or raises dlscope's own error for bad
input (``ManifestError`` or ``yaml.YAMLError``; ``InvalidMessage``): never another exception,
which would be a server error or a message retried instead of dead-lettered. Inputs are
generated both at random and as mutations of valid ones (the near misses a parser must
describe). The seed is fixed per example database, so a failure replays.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.config import REPOSITORY_ROOT
from shared.errors import InvalidMessage, ManifestError
from shared.manifests import Manifest, parse_manifest, read_yaml
from shared.messages import Envelope, decode, encode

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MANIFESTS = sorted((REPOSITORY_ROOT / "manifests").rglob("*.yaml"))

# JSON-like values of every kind a parser may meet, text with control characters included.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6), st.dictionaries(st.text(max_size=12), children, max_size=6)
    ),
    max_leaves=40,
)


def parsed(data: object) -> Manifest | None:
    """The manifest ``data`` describes, or None when it is refused as it should be."""
    try:
        return parse_manifest(data, origin="fuzzed manifest")
    except ManifestError:
        return None


@FUZZ
@given(text=st.text(max_size=400))
def test_any_text_is_a_manifest_or_refused_as_bad_yaml_or_a_bad_manifest(text: str) -> None:
    try:
        data = read_yaml(text)
    except yaml.YAMLError:
        return
    parsed(data)


@FUZZ
@given(data=values)
def test_any_json_value_is_a_manifest_or_refused_as_a_bad_manifest(data: Any) -> None:
    parsed(data)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += _paths(value, (*prefix, index))
    return found


def mutated(data: Any, choice: st.DataObject) -> Any:
    """A copy of ``data`` with one value anywhere in it removed or replaced by any other."""
    copied = copy.deepcopy(data)
    target = choice.draw(st.sampled_from(_paths(copied)[1:]))
    parent = copied
    for part in target[:-1]:
        parent = parent[part]
    if choice.draw(st.booleans()):
        del parent[target[-1]]
    else:
        parent[target[-1]] = choice.draw(values)
    return copied


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
@settings(FUZZ, max_examples=60)
@given(choice=st.data())
def test_a_valid_manifest_changed_anywhere_is_still_valid_or_refused(
    path: Path, choice: st.DataObject
) -> None:
    original = read_yaml(path.read_text())
    assert parsed(original) is not None
    parsed(mutated(original, choice))


ENVELOPE = {
    "event_id": str(uuid.UUID(int=1)),
    "type": "evaluation.requested",
    "schema_version": 1,
    "stream_id": f"evaluation-{uuid.UUID(int=2)}",
    "occurred_at": "2026-11-21T12:00:00Z",
    "correlation_id": str(uuid.UUID(int=2)),
    "payload": {
        "evaluation_id": str(uuid.UUID(int=2)),
        "model": "squeezenet",
        "framework": "onnxruntime",
    },
}


def opened(body: bytes) -> Envelope | None:
    """The envelope and its typed payload, or None when either is refused as invalid."""
    try:
        envelope = decode(body)
        envelope.typed()
    except InvalidMessage:
        return None
    return envelope


def test_the_valid_envelope_opens() -> None:
    assert opened(orjson.dumps(ENVELOPE)) is not None


@FUZZ
@given(body=st.binary(max_size=300))
def test_any_bytes_are_an_envelope_or_invalid(body: bytes) -> None:
    opened(body)


@FUZZ
@given(choice=st.data())
def test_a_valid_envelope_changed_anywhere_is_still_valid_or_invalid(
    choice: st.DataObject,
) -> None:
    try:
        body = orjson.dumps(mutated(ENVELOPE, choice))
    except orjson.JSONEncodeError:  # a float or an int JSON cannot hold
        return
    envelope = opened(body)
    if envelope is not None:  # what is accepted is sent on unchanged
        assert decode(encode(envelope)) == envelope


@FUZZ
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
def test_text_with_nul_never_gets_through_an_envelope(text: str) -> None:
    body = orjson.dumps({**ENVELOPE, "payload": {**ENVELOPE["payload"], "model": text}})
    envelope = opened(body)
    if envelope is not None:
        assert "\x00" not in envelope.payload["model"]

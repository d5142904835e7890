"""The bounds on what comes in (``shared.inputs``), the YAML a manifest may be written in,
and what may listen beyond loopback (``shared.exposure``)."""

from __future__ import annotations

import pytest
import yaml

from shared.config import Settings
from shared.errors import ConfigurationError
from shared.exposure import check_exposure, is_loopback, same_token
from shared.inputs import MAX_REASON, cleaned, quote, shorten, unsafe_text
from shared.manifests import read_yaml
from shared.messages import EvaluationFailed


def test_unsafe_text_says_where_a_nul_or_a_lone_surrogate_is() -> None:
    assert unsafe_text({"a": ["ok", {"b": "x\x00y"}]}) == (
        ("a", 1, "b"),
        "a NUL character (U+0000)",
    )
    found = unsafe_text(["fine", "\ud800"])
    assert found is not None
    assert found[0] == (1,)
    assert "unpaired surrogate (U+D800)" in found[1]
    key = unsafe_text({"k\x00": 1})
    assert key is not None
    assert key[1].startswith("a key with a NUL")
    assert unsafe_text({"emoji": "\U0001f600", "n": 1, "b": b"\x00"}) is None


def test_a_long_reason_is_cut_saying_how_much_and_a_quote_is_short() -> None:
    reason = shorten("x" * 20_000)
    assert len(reason) == MAX_REASON
    assert reason.endswith("more characters cut)")
    assert shorten("short") == "short"
    assert len(quote("y" * 10_000)) <= 80
    failed = EvaluationFailed(evaluation_id="0" * 32, stage="predictor", reason="z" * 10**6)
    assert len(failed.reason) == MAX_REASON


def test_text_from_a_server_is_cleaned_of_nul_and_lone_surrogates_and_a_reason_too() -> None:
    assert cleaned("internal\x00error \ud800!") == "internal\ufffderror \ufffd!"
    assert cleaned("fine \U0001f600") == "fine \U0001f600"
    failed = EvaluationFailed(evaluation_id="0" * 32, stage="predictor", reason="HTTP 500: a\x00b")
    assert failed.reason == "HTTP 500: a\ufffdb"
    assert unsafe_text(failed.model_dump(mode="json")) is None


def test_yaml_aliases_are_refused_and_nodes_are_counted() -> None:
    with pytest.raises(yaml.YAMLError, match=r"aliases \(\*a\) are not accepted"):
        read_yaml("a: &a [1, 2]\nb: *a\n")
    with pytest.raises(yaml.YAMLError, match="more than 100 nodes"):
        read_yaml("[" + ",".join(["1"] * 200) + "]", max_nodes=100)
    assert read_yaml("a: &a 1\nsha256: 0123\n") == {"a": 1, "sha256": "0123"}  # anchors alone


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "localhost", "127.1.2.3"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "gateway.example", ""])
def test_addresses_others_reach(host: str) -> None:
    assert not is_loopback(host)


def test_beyond_loopback_needs_a_token_or_the_operators_opt_in() -> None:
    def check(host: str, token: str | None, **settings: bool) -> None:
        check_exposure(host, Settings(**settings), "gateway", token=token, setting="THE_TOKEN")

    check("127.0.0.1", None)
    check("0.0.0.0", "t")
    with pytest.raises(ConfigurationError, match=r"would listen on 0\.0\.0\.0.*Set THE_TOKEN"):
        check("0.0.0.0", None)
    check("0.0.0.0", None, allow_unauthenticated=True)


def test_tokens_are_compared_whole() -> None:
    assert same_token("s3cret", "s3cret")
    assert not same_token("s3cre", "s3cret")
    assert not same_token(None, "s3cret")
    assert same_token("pässwörd", "pässwörd")  # not only ASCII

"""Credentials in a URL are hidden wherever it is shown, and out of any text quoting them."""

from __future__ import annotations

from shared.credentials import HIDDEN, public_url, scrubbed, secrets_of


def test_a_url_is_shown_without_its_user_password_or_secret_query_values() -> None:
    assert public_url("http://me:s3cret@host:8000/v1") == "http://host:8000/v1"
    assert public_url("https://host/v1?api_key=abc&model=x&token=t") == (
        f"https://host/v1?api_key={HIDDEN}&model=x&token={HIDDEN}"
    )
    assert public_url("http://host/v1") == "http://host/v1"


def test_secrets_are_found_as_written_and_decoded_and_hidden_in_any_text() -> None:
    secrets = secrets_of("http://me:p%40ss-word@host/v1?key=k3y-value", "an-api-key")
    assert set(secrets) == {"p%40ss-word", "p@ss-word", "k3y-value", "an-api-key"}
    quoted = "GET http://me:p@ss-word@host failed; key k3y-value; Bearer an-api-key"
    assert (
        scrubbed(quoted, secrets)
        == f"GET http://me:{HIDDEN}@host failed; key {HIDDEN}; Bearer {HIDDEN}"
    )
    assert secrets_of("http://host/v1") == ()

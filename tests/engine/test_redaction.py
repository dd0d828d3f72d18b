"""The redaction rules: ``redact_text`` removes credentials from text, ``redact`` masks the values of
secret-named keys at any depth and leaves ordinary text alone.

What reaches the database is checked in ``tests/integration/test_redaction_stored.py``, which
reads the stored rows back with raw SQL.
"""

from __future__ import annotations

import copy

import pytest
from django.test import override_settings

from django_durajobs.redaction import REDACTED, redact, redact_text, shown_text

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
GITHUB_CLASSIC = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GITHUB_FINE_GRAINED = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRS"


# redact_text ----------------------------------------------------------------------------------

SECRETS_IN_TEXT = [
    # (text, the secret, text around it that must survive)
    pytest.param("password=hunter2", "hunter2", "password=", id="password="),
    pytest.param("login failed: PASSWORD = 'hunter2' for bob", "hunter2", "for bob", id="PASSWORD = quoted"),
    pytest.param('DB_PASSWORD="two words"', "two words", "DB_PASSWORD=", id="double-quoted value"),
    pytest.param('{"api_key": "abc123", "user": "bob"}', "abc123", '"user": "bob"', id="JSON api_key"),
    pytest.param(f"Authorization: Bearer {JWT}", JWT, "Authorization:", id="Authorization Bearer JWT"),
    pytest.param(
        "Authorization: Bearer 8f14e45fceea167a5a36dedd4bea2543",
        "8f14e45fceea167a5a36dedd4bea2543",
        "Authorization:",
        id="Authorization Bearer opaque",
    ),
    pytest.param(
        'curl -H "Authorization: Basic dXNlcjpwYXNzd29yZA=="',
        "dXNlcjpwYXNzd29yZA==",
        "curl -H",
        id="Authorization Basic",
    ),
    pytest.param("postgres://app:s3cret@db:5432/x", "s3cret", "@db:5432/x", id="postgres URL"),
    pytest.param("https://deploy:pa55w0rd@git.example.com/r.git", "pa55w0rd", "example.com", id="https URL"),
    pytest.param(
        "redis://:s3cret@cache:6379/0",
        "s3cret",
        "cache:6379/0",
        id="URL password without user",
    ),
    pytest.param("token: abc", "abc", "token:", id="token:"),
    pytest.param(f"session cookie {JWT} expired", JWT, "expired", id="bare JWT"),
    pytest.param(f"pushing with {GITHUB_CLASSIC} now", GITHUB_CLASSIC, "pushing with", id="GitHub ghp_"),
    pytest.param(
        f"pushing with {GITHUB_FINE_GRAINED} now",
        GITHUB_FINE_GRAINED,
        "pushing with",
        id="GitHub fine-grained token",
    ),
    pytest.param(
        "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "export",
        id="AWS secret",
    ),
    pytest.param(
        "X-Api-Key: abc123xyz",
        "abc123xyz",
        "X-Api-Key",
        id="api-key with a hyphen",
    ),
    # The shapes issue 13 found missed.
    pytest.param(
        "deploy key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
        "-----END OPENSSH PRIVATE KEY-----\nok",
        "b3BlbnNzaC1rZXktdjEAAAAA",
        "-----END OPENSSH PRIVATE KEY-----\nok",
        id="PEM private key block",
    ),
    pytest.param(
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAcut",
        "MIIEowIBAAKCAQEAcut",
        "-----BEGIN RSA PRIVATE KEY-----",
        id="PEM block cut off before its END",
    ),
    pytest.param("pwd=hunter2 user=bob", "hunter2", "user=bob", id="pwd="),
    pytest.param("pass=hunter2 user=bob", "hunter2", "user=bob", id="pass="),
    pytest.param("DB_PASS=hunter2", "hunter2", "DB_PASS=", id="DB_PASS="),
    pytest.param("key=hunter2", "hunter2", "key=", id="key="),
    pytest.param("passwd: hunter2", "hunter2", "passwd:", id="passwd:"),
    pytest.param("secret_key = 'hunter2'", "hunter2", "secret_key", id="secret_key"),
    pytest.param('{"clientSecret": "hunter2"}', "hunter2", "clientSecret", id="camelCase clientSecret"),
    pytest.param("x-api-key: hunter2", "hunter2", "x-api-key:", id="x-api-key"),
    pytest.param("client_secret hunter2", "hunter2", "client_secret ", id="config key, a space, a value"),
    pytest.param("CLIENT_SECRET hunter2", "hunter2", "CLIENT_SECRET ", id="ALL-CAPS key, a space, a value"),
    pytest.param("bind 0.0.0.0\nrequirepass foobared\n", "foobared", "requirepass ", id="redis.conf"),
    pytest.param("password=a b c", "b c", "password=", id="password of several words"),
    pytest.param("password=a b c user=bob", "b c", "user=bob", id="several words, up to the next key"),
    pytest.param('{"password": "a\\"b-hunter2", "u": 1}', "b-hunter2", '"u": 1', id="JSON escaped quote"),
    pytest.param("postgres://u:p@ss/w@db/x", "ss/w", "@db/x", id="URL password with @ and /"),
]


@pytest.mark.parametrize("text, secret, kept", SECRETS_IN_TEXT)
def test_redact_text_removes_credentials(text, secret, kept):
    """The secret is gone, a marker says something was removed, and the context stays readable."""
    redacted = redact_text(text)

    assert secret not in redacted
    assert REDACTED in redacted
    assert kept in redacted


ORDINARY_TEXT = [
    "Deployed site 7 to 3 servers in 12.5 s",
    "Uploading https://example.com/static/app.js (2.1 MB)",
    "Copied 1,024 files from /srv/app to /backup/app",
    "Waiting for DNS record www.example.com to be visible",
    "Password reset email sent to bob@example.com",
    "ssh deploy@web1.example.com:22 exited with status 0",
    "",
    pytest.param(
        "Basic health checks passed",
    ),
    pytest.param(
        "Token refresh scheduled for 10:00",
    ),
    "the token expired, retrying",
    "key rotation finished",
    "key rotated",
    "Keys rotated on 3 servers",
    "passwords match",
    "pass-through mode on, key-value store ready",
    "monkey=1 author=2 passenger=3 keyboard=4 max_tokens=512",
    "https://example.com:8080/search?mail=bob@example.com",
    "mkdir -p /srv/app && tar -xzf app.tgz",
    "The secret of a good deploy is a small change",
    "KeyError: 'id'",
    "TokenExpiredError: the session ended",
]


@pytest.mark.parametrize("text", ORDINARY_TEXT)
def test_redact_text_leaves_ordinary_text_alone(text):
    assert redact_text(text) == text


# Key names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "DB_PASS",
        "pwd",
        "pass",
        "key",
        "passwd",
        "secret_key",
        "clientSecret",
        "x-api-key",
        "api-key",
        "APIKey",
        "idempotency_key",
        "PGPASSWORD",
        "sessionid",
        "csrftoken",
        "accessToken",
        "Authorization",
        "aws_secret_access_key",
        "otp",
        "sig",
        "credentials",
    ],
)
def test_a_key_naming_a_secret_is_sensitive_in_a_dict_and_in_text(key):
    """One rule for both: a segment names a secret, or the key holds a secret word."""
    assert redact({key: "hunter2"}) == {key: REDACTED}
    assert redact_text(f"{key}=hunter2") == f"{key}={REDACTED}"


@pytest.mark.parametrize(
    "key", ["monkey", "author", "passenger", "keyboard", "max_tokens", "tokenizer", "donkey_kong", "bypass"]
)
def test_a_key_whose_segments_name_no_secret_is_not_sensitive(key):
    assert redact({key: "hunter2"}) == {key: "hunter2"}
    assert redact_text(f"{key}=hunter2") == f"{key}=hunter2"


# redact ------------------------------------------------------------------------------------------


def test_redact_masks_secret_named_keys_at_any_depth_and_cleans_strings():
    value = {
        "Password": "hunter2",
        "db": {"API_KEY": "k-123", "host": "db1", "port": 5432},
        "servers": [{"name": "web1", "auth_token": "t-456"}, {"name": "web2", "ClientSecret": {"v": 1}}],
        "Authorization": "Bearer abcdef",
        "credentials": {"user": "bob", "pass": "x"},
        "note": "connected with password=hunter2",
        "pair": ("a", "token: zzz"),
        "count": 3,
    }
    original = copy.deepcopy(value)

    redacted = redact(value)

    assert redacted == {
        "Password": REDACTED,
        "db": {"API_KEY": REDACTED, "host": "db1", "port": 5432},
        "servers": [{"name": "web1", "auth_token": REDACTED}, {"name": "web2", "ClientSecret": REDACTED}],
        "Authorization": REDACTED,
        "credentials": REDACTED,
        "note": f"connected with password={REDACTED}",
        "pair": ["a", f"token: {REDACTED}"],
        "count": 3,
    }
    assert value == original  # a copy: the caller's value (a step result to replay) is untouched


def test_redact_handles_plain_values():
    assert redact("password=hunter2") == f"password={REDACTED}"
    assert redact(["ok", 1, None, True]) == ["ok", 1, None, True]
    assert redact(None) is None
    assert redact(4.5) == 4.5


def test_redact_keys_setting_adds_key_names():
    """DURAJOBS["REDACT_KEYS"] adds names (case- and '-'/'_'-insensitive); the built-ins still apply."""
    value = {"IBAN": "DE89370400440532013000", "card-number": "4111", "password": "p", "name": "bob"}

    assert redact(value)["IBAN"] == "DE89370400440532013000"
    assert redact_text("iban=DE89370400440532013000") == "iban=DE89370400440532013000"
    assert shown_text("iban=DE89370400440532013000") == "iban=DE89370400440532013000"

    with override_settings(DURAJOBS={"REDACT_KEYS": ["iban", "Card_Number"]}):
        masked = {"IBAN": REDACTED, "card-number": REDACTED, "password": REDACTED, "name": "bob"}
        assert redact(value) == masked
        assert redact_text("iban=DE89370400440532013000") == f"iban={REDACTED}"
        assert redact_text("password=x") == f"password={REDACTED}"
        assert shown_text("iban=DE89370400440532013000") == f"iban={REDACTED}"  # not the line kept before
    assert shown_text("iban=DE89370400440532013000") == "iban=DE89370400440532013000"

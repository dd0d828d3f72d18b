"""Real-world shapes of secrets, with fake values shaped like real ones (none of them is real).

Each ``Shape`` is a text as a program might print it and the part of it that must never be shown.
``tests/engine/test_secret_corpus.py`` checks each alone against ``redact_text``, and
``tests/e2e/test_secret_corpus.py`` end to end, in every place a job can put text. Every secret is
unique, so finding one anywhere is a leak.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    name: str
    text: str
    secret: str
    #: Its redaction runs on past its own text (a key block with no end hides all that follows).
    runs_to_the_end: bool = False


def _pem(kind: str, body: str, end: bool = True) -> str:
    block = f"-----BEGIN {kind}-----\n{body}\nZmFrZWtleWxpbmV0d29ub3RyZWFsYXRhbGwxMjM0NTY3ODkw\n"
    return block + (f"-----END {kind}-----" if end else "")


_GCP_KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7FAKEgcpKEYbody01"
_GCP_KEY_ID = "3f1c0a9b7e5d4c2b1a09f8e7d6c5b4a3f2e1d0c9"
_GCP_JSON = (
    '{"type": "service_account", "project_id": "demo-project", '
    f'"private_key_id": "{_GCP_KEY_ID}", '
    f'"private_key": "-----BEGIN PRIVATE KEY-----\\n{_GCP_KEY_BODY}\\n-----END PRIVATE KEY-----\\n", '
    '"client_email": "svc@demo-project.iam.gserviceaccount.com"}'
)
_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTQyIiwiZXhwIjoxOTAwMDAwMDAwfQ"
    ".FAKEsignatureFAKEsignatureFAKE12"
)

CORPUS = (
    # Cloud keys
    Shape(
        "aws access key id in a config", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"
    ),
    Shape("aws access key id alone", "using AKIAZ3MHQ4X7EXAMPLE2 from the profile", "AKIAZ3MHQ4X7EXAMPLE2"),
    Shape(
        "aws secret in the environment",
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    Shape(
        "aws credentials file",
        "[default]\naws_access_key_id = AKIAI44QH8DHBEXAMPLE\n"
        "aws_secret_access_key = je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY\n",
        "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",
    ),
    Shape(
        "aws session token",
        "AWS_SESSION_TOKEN=IQoJb3JpZ2luX2VjEFAKEaCXVzLWVhc3QtMSJHMEUCIQDfake0123",
        "IQoJb3JpZ2luX2VjEFAKEaCXVzLWVhc3QtMSJHMEUCIQDfake0123",
    ),
    Shape("gcp service account private key", _GCP_JSON, _GCP_KEY_BODY),
    Shape("gcp service account private key id", _GCP_JSON, _GCP_KEY_ID),
    Shape(
        "google api key",
        "geocoding with AIzaSyD3fAkEkEyF0rT3st1nGpurp0s3sXyZ123 failed",
        "AIzaSyD3fAkEkEyF0rT3st1nGpurp0s3sXyZ123",
    ),
    Shape(
        "google oauth access token",
        "refreshed: ya29.a0AfB_byFAKEaccessTOKEN0123456789abcdef",
        "ya29.a0AfB_byFAKEaccessTOKEN0123456789abcdef",
    ),
    Shape(
        "azure storage connection string",
        "DefaultEndpointsProtocol=https;AccountName=demoacct;"
        "AccountKey=bm90LWEtcmVhbC1rZXktanVzdC1hLXRlc3QtdmFsdWUtMTIzNDU2Nzg5MA==;"
        "EndpointSuffix=core.windows.net",
        "bm90LWEtcmVhbC1rZXktanVzdC1hLXRlc3QtdmFsdWUtMTIzNDU2Nzg5MA==",
    ),
    Shape(
        "azure sas url",
        "https://demoacct.blob.core.windows.net/backups/db.dump?sv=2022-11-02&ss=b&srt=o&sp=r"
        "&se=2030-01-01T00:00:00Z&sig=Zm9vYmFyRkFLRXNpZ25hdHVyZQ%3D%3D",
        "Zm9vYmFyRkFLRXNpZ25hdHVyZQ%3D%3D",
    ),
    Shape(
        "azure service bus connection string",
        "Endpoint=sb://demo.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=c2VydmljZWJ1c0ZBS0VrZXkxMjM0NTY3ODkwYWJjZA=",
        "c2VydmljZWJ1c0ZBS0VrZXkxMjM0NTY3ODkwYWJjZA=",
    ),
    Shape(
        "azure client secret",
        "AZURE_CLIENT_SECRET=Qx8Q~fAkEcLiEnTsEcReT.abcDEF123456-ghiJKL",
        "Qx8Q~fAkEcLiEnTsEcReT.abcDEF123456-ghiJKL",
    ),
    # Private keys
    Shape(
        "rsa private key",
        _pem("RSA PRIVATE KEY", "MIIEowIBAAKCAQEAuFAKErsaKEYmaterialNOTreal0123456789"),
        "MIIEowIBAAKCAQEAuFAKErsaKEYmaterialNOTreal0123456789",
    ),
    Shape(
        "ec private key",
        _pem("EC PRIVATE KEY", "MHcCAQEEIFAKEecKEYmaterialNOTrealABCDEFGHIJoAoGCCqGSM49"),
        "MHcCAQEEIFAKEecKEYmaterialNOTrealABCDEFGHIJoAoGCCqGSM49",
    ),
    Shape(
        "openssh private key",
        _pem("OPENSSH PRIVATE KEY", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQFAKEopensshKEY"),
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQFAKEopensshKEY",
    ),
    Shape(
        "private key cut off before its end",
        "key material follows:\n"
        + _pem("PRIVATE KEY", "MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkFAKEcutOFF", end=False),
        "MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkFAKEcutOFF",
        runs_to_the_end=True,
    ),
    Shape(
        "pgp private key block",
        _pem("PGP PRIVATE KEY BLOCK", "lQOYBGFAKEpgpKEYmaterialNOTrealXYZ0987654321"),
        "lQOYBGFAKEpgpKEYmaterialNOTrealXYZ0987654321",
    ),
    # Tokens and auth headers
    Shape("jwt", f"session {_JWT} expired", _JWT),
    Shape(
        "bearer header",
        "Authorization: Bearer 2YotnFZFEjr1zCsicMWpAA.fake-Opaque-Token_123",
        "2YotnFZFEjr1zCsicMWpAA.fake-Opaque-Token_123",
    ),
    Shape(
        "bearer in a sentence",
        "retrying request with bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0 after a 401",
        "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    ),
    Shape(
        "basic auth header",
        "Authorization: Basic YWRtaW46czNjcjN0LXBhc3N3b3JkLWZha2U=",
        "YWRtaW46czNjcjN0LXBhc3N3b3JkLWZha2U=",
    ),
    Shape(
        "header in a curl command",
        "curl -H 'Authorization: Bearer tok_FAKE9a8b7c6d5e4f3a2b1c' https://api.example.com/v1",
        "tok_FAKE9a8b7c6d5e4f3a2b1c",
    ),
    Shape(
        "token auth header",
        "Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
        "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
    ),
    Shape(
        "x-api-key header",
        "X-Api-Key: 7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    ),
    Shape(
        "proxy authorization header",
        "Proxy-Authorization: Basic cHJveHl1c2VyOnByb3h5cGFzczEyMw==",
        "cHJveHl1c2VyOnByb3h5cGFzczEyMw==",
    ),
    Shape(
        "cookie header",
        "Cookie: theme=dark; sessionid=k3xw9qv2m8n4p7r1t5y6u0ifake; lang=en",
        "k3xw9qv2m8n4p7r1t5y6u0ifake",
    ),
    Shape(
        "set-cookie header",
        "Set-Cookie: sessionid=abcdef0123456789fakesession; HttpOnly; Path=/",
        "abcdef0123456789fakesession",
    ),
    Shape(
        "session cookie in a dump",
        "request cookies: sessionid=z9y8x7w6v5u4t3s2r1q0fakesess; messages=abc",
        "z9y8x7w6v5u4t3s2r1q0fakesess",
    ),
    Shape(
        "csrf token in a dump",
        "request cookies: csrftoken=FAKEcsrfTOKEN1234567890abcdef",
        "FAKEcsrfTOKEN1234567890abcdef",
    ),
    # Database and broker URLs
    Shape(
        "postgres url",
        "DATABASE_URL=postgres://app:Pg-s3cret-FAKE-91@db.internal:5432/app",
        "Pg-s3cret-FAKE-91",
    ),
    Shape("mysql url", "mysql://root:My5ql_FAKE_pw!@127.0.0.1:3306/shop", "My5ql_FAKE_pw!"),
    Shape("redis url without a user", "CACHE_URL=redis://:r3dis-FAKE-pass@cache:6379/0", "r3dis-FAKE-pass"),
    Shape("amqp url", "BROKER_URL=amqp://guest:Rabb1tFAKEpw@rabbit:5672//", "Rabb1tFAKEpw"),
    Shape(
        "mongodb+srv url",
        "mongodb+srv://admin:M0ng0FAKEpw@cluster0.ab1cd.mongodb.net/app?retryWrites=true&w=majority",
        "M0ng0FAKEpw",
    ),
    Shape("url password with @ and /", "postgres://u:p@ss/w0rd-FAKE@db/x", "p@ss/w0rd-FAKE"),
    Shape(
        "https url with a password",
        "git clone https://deploy:Gh-FAKE-deploy-pw@git.example.com/repo.git",
        "Gh-FAKE-deploy-pw",
    ),
    # Vendors' tokens
    Shape(
        "github classic token",
        "pushing with ghp_FAKEa1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7",
        "ghp_FAKEa1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7",
    ),
    Shape(
        "github fine-grained token",
        "gh auth login --with-token "
        "github_pat_11AFAKE0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ",
        "github_pat_11AFAKE0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ",
    ),
    Shape(
        "github oauth token",
        "oauth returned gho_FAKE16C7e42F292c6912E7710c838347Ae178B4a",
        "gho_FAKE16C7e42F292c6912E7710c838347Ae178B4a",
    ),
    Shape("gitlab token", "CI used glpat-FAKExxYyZz0123456789ab", "glpat-FAKExxYyZz0123456789ab"),
    Shape(
        "slack bot token",
        "slack client: xoxb-123456789012-1234567890123-FAKEslackBOTtoken1234",
        "xoxb-123456789012-1234567890123-FAKEslackBOTtoken1234",
    ),
    Shape(
        "slack webhook url",
        "posting to https://hooks.slack.com/services/T0FAKE000/B0FAKE000/FAKEwebhookSECRET1234567",
        "FAKEwebhookSECRET1234567",
    ),
    Shape(
        "stripe secret key",
        "stripe: sk_live_FAKE51HxYzAbCdEfGhIjKlMn0p",
        "sk_live_FAKE51HxYzAbCdEfGhIjKlMn0p",
    ),
    Shape(
        "stripe restricted key", "using rk_live_FAKE51HqRsTuVwXyZ0123456", "rk_live_FAKE51HqRsTuVwXyZ0123456"
    ),
    Shape(
        "stripe webhook secret",
        "verify with whsec_FAKE5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c",
        "whsec_FAKE5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c",
    ),
    Shape(
        "openai key",
        "model call with sk-FAKEaBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789abcd",
        "sk-FAKEaBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789abcd",
    ),
    Shape(
        "openai project key",
        "OPENAI key sk-proj-FAKE_aBcDeFgHiJkLmNoPqRsTuVwXyZ-0123456789",
        "sk-proj-FAKE_aBcDeFgHiJkLmNoPqRsTuVwXyZ-0123456789",
    ),
    Shape(
        "anthropic key",
        "client = Anthropic(api_key) # sk-ant-api03-FAKEaBcDeFgHiJkLmNoPqRsTuVwXyZ012345-6789AA",
        "sk-ant-api03-FAKEaBcDeFgHiJkLmNoPqRsTuVwXyZ012345-6789AA",
    ),
    Shape(
        "sendgrid key",
        "mailer SG.FAKEngeVfQFYQlKU0ufo8x5A.FAKEkzWbbcm2pFkdpdHP9wHfeOtkT7nF8eHRW0bMqzs",
        "SG.FAKEngeVfQFYQlKU0ufo8x5A.FAKEkzWbbcm2pFkdpdHP9wHfeOtkT7nF8eHRW0bMqzs",
    ),
    Shape(
        "twilio auth token",
        "TWILIO_AUTH_TOKEN=9f3b2c1d0e9f8a7b6c5d4e3f2a1b0fac",
        "9f3b2c1d0e9f8a7b6c5d4e3f2a1b0fac",
    ),
    Shape("twilio api key", "twilio key SK" + "0fa4e1f2e3d4c5b6" * 2, "SK" + "0fa4e1f2e3d4c5b6" * 2),
    Shape(
        "npm token in .npmrc",
        "//registry.npmjs.org/:_authToken=npm_FAKEabcdefghijklmnopqrstuvwxyz012345",
        "npm_FAKEabcdefghijklmnopqrstuvwxyz012345",
    ),
    Shape(
        "pypi token",
        "twine upload with pypi-AgEIcHlwaS5vcmcCJGFBSEFLRWZha2V0b2tlbmZha2V0b2tlbmZha2V0b2tlbgACKlsz",
        "pypi-AgEIcHlwaS5vcmcCJGFBSEFLRWZha2V0b2tlbmZha2V0b2tlbmZha2V0b2tlbgACKlsz",
    ),
    Shape(
        "heroku api key",
        "HEROKU_API_KEY=c0ffee00-1234-4abc-9def-0123456fa4eb",
        "c0ffee00-1234-4abc-9def-0123456fa4eb",
    ),
    Shape(
        "digitalocean token",
        "doctl auth init -t dop_v1_" + "fa4e" * 16,
        "dop_v1_" + "fa4e" * 16,
    ),
    Shape(
        "shopify token",
        "shop admin shpat_fa4e0123456789abcdeffa4e01234567",
        "shpat_fa4e0123456789abcdeffa4e01234567",
    ),
    Shape(
        "square token",
        "square EAAAEFAKEaBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTu",
        "EAAAEFAKEaBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTu",
    ),
    Shape(
        "mailgun key",
        "mailgun key-fa4e0123456789abcdeffa4e01234567 rejected",
        "key-fa4e0123456789abcdeffa4e01234567",
    ),
    # KEY=VALUE and KEY VALUE in config files and dumps
    Shape(".env line", "DB_PASS=Sup3r-FAKE-dbpass", "Sup3r-FAKE-dbpass"),
    Shape(".env export, quoted", 'export STRIPE_SECRET="s3cr3t with spaces FAKE"', "s3cr3t with spaces FAKE"),
    Shape("yaml", "database:\n  host: db\n  password: Yaml-FAKE-pw-77\n  port: 5432\n", "Yaml-FAKE-pw-77"),
    Shape("ini", "[mysql]\nuser = app\npasswd = Ini-FAKE-pw-31\n", "Ini-FAKE-pw-31"),
    Shape("json with an escaped quote", '{"password": "Js\\"on-FAKE-pw-44", "user": "bob"}', "on-FAKE-pw-44"),
    Shape(
        "django settings dump",
        "{'default': {'ENGINE': 'django.db.backends.postgresql', 'NAME': 'shop', 'USER': 'shop', "
        "'PASSWORD': 'Dj4ngo-FAKE-pw', 'HOST': 'db'}}",
        "Dj4ngo-FAKE-pw",
    ),
    Shape(
        "django secret key",
        "SECRET_KEY = 'django-insecure-FAKE-k3y-abcdefghijklmnop'",
        "django-insecure-FAKE-k3y-abcdefghijklmnop",
    ),
    Shape(
        "traceback with locals",
        'Traceback (most recent call last):\n  File "/srv/app/db.py", line 41, in connect\n'
        "    conn = psycopg.connect(dsn)\n"
        "    dsn = 'host=db user=app password=Tr4ceback-FAKE-pw'\n"
        "psycopg.OperationalError: connection failed",
        "Tr4ceback-FAKE-pw",
    ),
    Shape(
        "keyword arguments in a repr",
        "connect(host='db', user='app', password='Kw4rgs-FAKE-pw', port=5432)",
        "Kw4rgs-FAKE-pw",
    ),
    Shape("curl -u", "curl -u admin:Curl-FAKE-pw-88 https://api.example.com/v1/items", "Curl-FAKE-pw-88"),
    Shape("mysql -p", "mysqldump -u root -pMysqld-FAKE-pw shop > shop.sql", "Mysqld-FAKE-pw"),
    Shape("PGPASSWORD", "PGPASSWORD=Pgpw-FAKE-20 psql -h db -U app app", "Pgpw-FAKE-20"),
    Shape("--password option", "manage.py createsuperuser --password Cli-FAKE-pw-12", "Cli-FAKE-pw-12"),
    Shape("redis.conf", "bind 127.0.0.1\nrequirepass Redis-FAKE-pass-5\nmaxmemory 2gb", "Redis-FAKE-pass-5"),
    Shape("client_secret and a space", "client_secret Csp-FAKE-secret-9", "Csp-FAKE-secret-9"),
    Shape("camelCase key", '{clientSecret: "Camel-FAKE-secret"}', "Camel-FAKE-secret"),
    Shape("a password of several words", "password=correct horse FAKE battery", "correct horse FAKE battery"),
    Shape(
        "odbc connection string",
        "Driver={ODBC Driver 18};Server=db;Uid=sa;Pwd=Odbc-FAKE-pw-3;",
        "Odbc-FAKE-pw-3",
    ),
    Shape("key=", "key=Keyeq-FAKE-value-5", "Keyeq-FAKE-value-5"),
    Shape("pass=", "ftp login pass=Ftp-FAKE-pass-6 user=anon", "Ftp-FAKE-pass-6"),
    Shape("secret_key in yaml", "secret_key: Yml-FAKE-secret-7", "Yml-FAKE-secret-7"),
)

#: End to end (tests/e2e/test_secret_corpus.py) a job carries a group of shapes, their texts a line
#: apart: four times fewer jobs and pages, each shape still in every place. A shape whose redaction
#: runs to the end of the text comes last in its group. Redacting a group is redacting each of its
#: shapes alone (tests/engine/test_secret_corpus.py), so a group cannot hide one shape's leak
#: behind another's redaction.
GROUP_SIZE = 4
_IN_GROUP_ORDER = sorted(CORPUS, key=lambda shape: shape.runs_to_the_end)
GROUPS = tuple(
    tuple(_IN_GROUP_ORDER[start : start + GROUP_SIZE]) for start in range(0, len(CORPUS), GROUP_SIZE)
)


def group_text(group: tuple[Shape, ...]) -> str:
    return "\n".join(shape.text for shape in group)

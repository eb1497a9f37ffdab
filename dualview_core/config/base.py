"""What every configuration model shares, and which setting names hold secrets."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

# sentence-transformers' pooling modes (its Pooling module checks them again when a model is built)
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
Pooling = Literal[POOLING_MODES]

SECRET_WORDS = ("key", "secret", "token", "password", "credential", "authorization")


def is_secret_name(name: str) -> bool:
    """Whether a setting's name says it holds a credential (key, secret, token, ...). A name ending in
    `_env` (api_key_env) names the environment variable that holds one, which is not a secret.

        >>> is_secret_name("aws_secret_access_key"), is_secret_name("api_key_env"), is_secret_name("endpoint_url")
        (True, False, False)
    """
    name = name.lower()
    return any(word in name for word in SECRET_WORDS) and not name.endswith("_env")


REDACTED = "[redacted]"
# a credential where text shows one: an Authorization header's value, a bearer token, a key=value or
# "key": "value" pair whose name says secret, and OpenAI-style keys
_SECRET_VALUES = re.compile(
    r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{6,}"
    r"|((?:authorization|api[_-]?key|access[_-]?key|secret|token|password|x-api-key)[\"']?\s*[:=]\s*[\"']?)"
    r"(?!bearer\s)[^\s\"',;}&]{4,}"
    r"|\bsk-[A-Za-z0-9_-]{8,}"
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every given secret value, and anything shaped like a credential, replaced. Applied
    to text from outside (an endpoint's error body, an exception) before it is stored or logged.

        >>> redact('HTTP 401: {"error": "bad key sk-abcdef123456", "api_key": "hunter2hunter2"}')
        'HTTP 401: {"error": "bad key [redacted]", "api_key": "[redacted]"}'
        >>> redact("Authorization: Bearer abc.def-123 rejected", ["s3cr3t"]), redact("s3cr3t!", ["s3cr3t"])
        ('Authorization: Bearer [redacted] rejected', '[redacted]!')
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)

    def keep_name(m: re.Match) -> str:
        return (m.group(1) or m.group(2) or "") + REDACTED

    return _SECRET_VALUES.sub(keep_name, text)


class ConfigModel(BaseModel):
    """Frozen, and an unknown field is an error (a misspelt setting never passes silently)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

"""What every configuration model shares, and which setting names hold secrets."""

from __future__ import annotations

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


class ConfigModel(BaseModel):
    """Frozen, and an unknown field is an error (a misspelt setting never passes silently)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

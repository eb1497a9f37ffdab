"""Which endpoint a row's attempt goes to, and the config that names the endpoints."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dualview_core.config import OpenAIEngineConfig
from tasks.synthesis.openai_client import endpoint_index


def test_the_key_picks_the_first_endpoint_and_each_retry_the_next():
    # crc32(b"a") = 3904355907 (≡ 0 mod 3), crc32(b"b") = 1908338681 (≡ 2 mod 3)
    assert [endpoint_index("a", attempt, 3) for attempt in (1, 2, 3, 4)] == [0, 1, 2, 0]
    assert [endpoint_index("b", attempt, 3) for attempt in (1, 2, 3, 4)] == [2, 0, 1, 2]
    assert {endpoint_index(f"k{i}", attempt, 1) for i in range(5) for attempt in (1, 2)} == {0}


def test_base_urls_replace_base_url_and_must_be_distinct():
    assert OpenAIEngineConfig(base_url="http://h:1/v1/").endpoints() == ("http://h:1/v1",)
    assert OpenAIEngineConfig(base_urls=("http://a/v1", "http://b/v1/")).endpoints() == ("http://a/v1", "http://b/v1")
    with pytest.raises(ValidationError, match="distinct"):
        OpenAIEngineConfig(base_urls=("http://a/v1", "http://a/v1/"))
    with pytest.raises(ValidationError):
        OpenAIEngineConfig(actors=0)


def test_the_command_line_spreads_over_repeated_base_urls():
    from flows.cli import build_parser
    from flows.commands.synthesize_cli import config_from_args

    def openai(*flags: str) -> OpenAIEngineConfig:
        args = build_parser().parse_args(["synthesize", "--seeds", "s", "--out", "o", "--engine", "openai", *flags])
        return config_from_args(args).openai

    one = openai("--base-url", "http://a/v1")
    assert one.endpoints() == ("http://a/v1",) and one.actors == 1
    two = openai("--base-url", "http://a/v1", "--base-url", "http://b/v1", "--actors", "3", "--concurrency", "16")
    assert two.endpoints() == ("http://a/v1", "http://b/v1") and (two.actors, two.concurrency) == (3, 16)
    assert openai().endpoints() == ("http://127.0.0.1:8000/v1",)

"""The process's shared HTTP client (core.lib.http)."""

import os

import httpx

from core.lib import http
from core.testing_openai import OpenAITestServer


def test_one_client_per_process(monkeypatch):
    monkeypatch.setattr(http, "_client", None)
    first = http.http_client()
    assert http.http_client() is first
    assert isinstance(first, httpx.Client) and not first.follow_redirects
    # A forked child (another pid) does not use its parent's sockets.
    monkeypatch.setattr(os, "getpid", lambda: -1)
    child = http.http_client()
    assert child is not first
    assert http.http_client() is child


def test_embedding_calls_share_it_and_build_no_client_each(monkeypatch):
    """`httpx.post` built a client, and an SSL context, for every call (43 ms of CPU)."""
    from core.embeddings import OpenAIEmbeddingProvider

    built = []
    real_init = httpx.Client.__init__

    def counting_init(self, *args, **kwargs):
        built.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(http, "_client", None)
    monkeypatch.setattr(httpx.Client, "__init__", counting_init)
    with OpenAITestServer() as server:
        provider = OpenAIEmbeddingProvider(base_url=server.url, model_name="test-embed")
        for text in ("one", "two", "three"):
            assert len(provider.embed([text])) == 1
    assert len(built) == 1

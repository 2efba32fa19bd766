"""A workspace's provider endpoint is looked up and checked when each request is sent, and the
request goes to the address checked (DNS rebinding: a name that answered a public address when
it was saved may answer 169.254.169.254 or 127.0.0.1 later)."""

import ipaddress
import socket
from unittest import mock

import httpx
import pytest
from django.test import SimpleTestCase, override_settings

from core.embeddings import (
    EmbeddingEndpointRefused,
    EmbeddingError,
    OpenAIEmbeddingProvider,
    embedding_provider_for,
)
from core.lib import addresses
from core.lib.addresses import AddressRefused, host_address_checked, url_pinned
from core.llm import LLMEndpointRefused, LLMError, LLMUnavailable, chat_complete
from core.services import provider_credential_set
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.tests.factories import entry_factory, memory_user_factory

NAME = "llm.rebinding.test"
MESSAGES = [{"role": "user", "content": "hi"}]


class Resolver:
    """`socket.getaddrinfo` answering NAME with the next of `answers` (the last one repeats)
    and every other host as the system does."""

    def __init__(self, *answers: str):
        self.answers = list(answers)
        self.asked = 0
        self._real = socket.getaddrinfo

    def __call__(self, host, port, *args, **kwargs):
        if host != NAME:
            return self._real(host, port, *args, **kwargs)
        answer = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        family = socket.AF_INET6 if ":" in answer else socket.AF_INET
        sockaddr = (answer, port or 0, 0, 0) if family == socket.AF_INET6 else (answer, port or 0)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)]


class Endpoint(OpenAITestServer):
    """The OpenAI-compatible test server, answering "hello" and [1.0, 0.0], reached by NAME."""

    def __init__(self):
        super().__init__()
        self.chat_handler = lambda body: "hello"
        self.embedding_handler = lambda texts: [[1.0, 0.0] for _ in texts]

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def received(self) -> list[tuple]:
        """(path, Host, Authorization) of each request."""
        return [
            (path, headers.get("Host"), headers.get("Authorization"))
            for (path, _), headers in zip(self.requests, self.request_headers, strict=True)
        ]

    @property
    def named_url(self) -> str:
        return f"http://{NAME}:{self.port}/v1"


class Judge:
    """`address_public` that records what it judged, with 127.0.0.1 (the one address a test
    can connect to) standing in for a public address."""

    def __init__(self):
        self.judged = []

    def __call__(self, address) -> bool:
        self.judged.append(str(address))
        return address == ipaddress.ip_address("127.0.0.1") or address.is_global


@override_settings(PROVIDER_ALLOW_PRIVATE_URLS=False)
class ProviderAddressAtSendTimeTests(MemoryTestCase):
    def setUp(self):
        self.endpoint = Endpoint().__enter__()
        self.addCleanup(self.endpoint.__exit__, None, None, None)

    def resolving(self, *answers: str) -> Resolver:
        resolver = Resolver(*answers)
        patcher = mock.patch("socket.getaddrinfo", resolver)
        patcher.start()
        self.addCleanup(patcher.stop)
        return resolver

    def use(self, purpose: str, base_url: str | None = None) -> None:
        provider_credential_set(
            workspace=self.workspace,
            purpose=purpose,
            base_url=base_url or self.endpoint.named_url,
            model="m",
            api_key="sk-workspace",
        )

    def test_chat_to_a_name_now_answering_loopback_is_refused(self):
        """The name answers 127.0.0.1 at send time: nothing is sent, and callers take their
        offline method (LLMUnavailable), as without an endpoint."""
        self.use("chat")
        self.resolving("127.0.0.1")
        with self.assertLogs("core.llm", "WARNING"), pytest.raises(LLMEndpointRefused) as caught:
            chat_complete(workspace=self.workspace, messages=MESSAGES)
        assert isinstance(caught.value, LLMUnavailable)
        assert "127.0.0.1" in str(caught.value)
        assert self.endpoint.received == []

    def test_embeddings_to_a_name_now_answering_loopback_are_refused(self):
        """The embedding endpoint's name answers 127.0.0.1: an EmbeddingError that names the
        refusal, and nothing is sent."""
        self.use("embedding")
        self.resolving("127.0.0.1")
        provider = embedding_provider_for(self.workspace)
        with self.assertLogs("core.embeddings", "WARNING"), pytest.raises(EmbeddingEndpointRefused) as caught:
            provider.embed(["a text"])
        assert isinstance(caught.value, EmbeddingError)
        assert "refused" in str(caught.value)
        assert self.endpoint.received == []

    def test_an_address_literal_is_checked_too(self):
        """A URL naming 127.0.0.1 itself (the test server's own) is refused the same way."""
        url = f"http://127.0.0.1:{self.endpoint.port}/v1"
        self.use("chat", url)
        with self.assertLogs("core.llm", "WARNING"), pytest.raises(LLMEndpointRefused):
            chat_complete(workspace=self.workspace, messages=MESSAGES)
        with self.assertLogs("core.embeddings", "WARNING"), pytest.raises(EmbeddingEndpointRefused):
            OpenAIEmbeddingProvider(base_url=url, model_name="m").embed(["a text"])
        assert self.endpoint.received == []

    @override_settings(PROVIDER_ALLOW_PRIVATE_URLS=True)
    def test_private_addresses_are_allowed_by_the_setting(self):
        """PROVIDER_ALLOW_PRIVATE_URLS lets both calls reach a private address."""
        self.use("chat")
        self.resolving("127.0.0.1")
        assert chat_complete(workspace=self.workspace, messages=MESSAGES) == "hello"
        assert OpenAIEmbeddingProvider(base_url=self.endpoint.named_url, model_name="m").embed(["x"]) == [
            [1.0, 0.0]
        ]
        assert [path for path, _, _ in self.endpoint.received] == ["/v1/chat/completions", "/v1/embeddings"]

    def test_an_endpoint_a_superuser_saved_may_be_private(self):
        """A superuser's save stands for the address (a self-hosted model): both calls reach it,
        while the same endpoint saved without that approval is refused."""
        self.resolving("127.0.0.1")
        for purpose in ("chat", "embedding"):
            provider_credential_set(
                workspace=self.workspace,
                purpose=purpose,
                base_url=self.endpoint.named_url,
                model="m",
                private_allowed=True,
            )
        assert chat_complete(workspace=self.workspace, messages=MESSAGES) == "hello"
        assert embedding_provider_for(self.workspace).embed(["x"]) == [[1.0, 0.0]]
        assert len(self.endpoint.received) == 2
        self.use("chat")
        with self.assertLogs("core.llm", "WARNING"), pytest.raises(LLMEndpointRefused):
            chat_complete(workspace=self.workspace, messages=MESSAGES)

    def test_the_operators_endpoint_in_the_settings_is_not_checked(self):
        """LLM_BASE_URL and EMBEDDING_BASE_URL are the operator's (a model on the server's
        own network), not a tenant's word."""
        self.resolving("127.0.0.1")
        with override_settings(LLM_BASE_URL=self.endpoint.named_url, LLM_MODEL="m", LLM_API_KEY=""):
            assert chat_complete(workspace=self.workspace, messages=MESSAGES) == "hello"
        with override_settings(EMBEDDING_BASE_URL=self.endpoint.named_url + "/", EMBEDDING_MODEL="m"):
            assert embedding_provider_for(self.workspace).embed(["x"]) == [[1.0, 0.0]]
        assert len(self.endpoint.received) == 2

    def test_requests_go_to_the_address_checked_not_a_second_answer(self):
        """The name is looked up and judged once per call; the connection goes to the answer
        judged (a second lookup would answer 127.0.0.2, where nothing listens) and Host still
        carries the name."""
        self.use("chat")
        self.use("embedding")
        resolver = self.resolving("127.0.0.1", "127.0.0.2")
        judge = Judge()
        with mock.patch.object(addresses, "address_public", judge):
            assert chat_complete(workspace=self.workspace, messages=MESSAGES) == "hello"
            assert (resolver.asked, judge.judged) == (1, ["127.0.0.1"])
            resolver.asked, judge.judged = 0, []
            assert embedding_provider_for(self.workspace).embed(["x"]) == [[1.0, 0.0]]
            assert (resolver.asked, judge.judged) == (1, ["127.0.0.1"])
        host = f"{NAME}:{self.endpoint.port}"
        assert self.endpoint.received == [
            ("/v1/chat/completions", host, "Bearer sk-workspace"),
            ("/v1/embeddings", host, "Bearer sk-workspace"),
        ]

    def test_a_name_that_cannot_be_looked_up_is_a_provider_failure(self):
        """A failed lookup is a transport failure (retried), not a refusal."""
        self.use("chat")
        with mock.patch("socket.getaddrinfo", side_effect=socket.gaierror(-2, "Name or service not known")):
            with pytest.raises(LLMError):
                chat_complete(workspace=self.workspace, messages=MESSAGES)
            with pytest.raises(EmbeddingError) as caught:
                OpenAIEmbeddingProvider(base_url=self.endpoint.named_url, model_name="m").embed(["x"])
            assert not isinstance(caught.value, EmbeddingEndpointRefused)

    def test_the_extract_api_falls_back_to_offline_extraction(self):
        """Through the API, a refused chat endpoint answers 200 with the offline method."""
        self.use("chat")
        self.resolving("127.0.0.1")
        person = memory_user_factory(self.workspace)
        body = {
            "agent": self.agent.slug,
            "memory_user": str(person.pk),
            "transcript": [{"id": "m1", "role": "user", "content": "I moved to Lisbon last month."}],
            "sync": True,
        }
        with self.assertLogs("core.llm", "WARNING"):
            response = self.api().post("/api/v1/episodic-entries/extract/", body, format="json")
        assert response.status_code == 200, response.content
        assert response.json()["offline_used"] is True
        assert response.json()["llm_used"] is False
        assert self.endpoint.received == []

    def test_the_search_api_ranks_lexically(self):
        """Through the API, a refused embedding endpoint answers 200 with full-text ranking."""
        person = memory_user_factory(self.workspace)
        wanted = entry_factory(
            agent=self.agent, memory_user=person, content="Ada is training for a marathon.", embed=False
        )
        self.use("embedding")
        self.resolving("127.0.0.1")
        body = {"agent": self.agent.slug, "memory_user": str(person.pk), "query": "marathon"}
        with self.assertLogs("core.embeddings", "WARNING"):
            response = self.api().post("/api/v1/episodic-entries/search/", body, format="json")
        assert response.status_code == 200, response.content
        assert [hit["entry"]["id"] for hit in response.json()["results"]] == [str(wanted.pk)]
        assert self.endpoint.received == []


class AddressCheckTests(SimpleTestCase):
    def test_every_answer_must_be_public(self):
        """A name answering a public and a private address is refused: a second lookup could
        pick either."""
        for answers in (
            ["93.184.215.14", "10.0.0.1"],
            ["169.254.169.254"],
            ["::ffff:169.254.169.254"],
        ):
            with self.subTest(answers=answers):
                found = [ipaddress.ip_address(answer) for answer in answers]
                with (
                    mock.patch.object(addresses, "host_addresses", return_value=found),
                    pytest.raises(AddressRefused),
                ):
                    host_address_checked(NAME)
        with mock.patch.object(
            addresses, "host_addresses", return_value=[ipaddress.ip_address("93.184.215.14")]
        ):
            assert host_address_checked(NAME) == "93.184.215.14"

    def test_a_pinned_url_keeps_the_name_for_host_and_tls(self):
        """The URL names the address; Host and SNI (and so the certificate check) the name."""
        url, headers, extensions = url_pinned("https://Bücher.example:8443/v1/embeddings", "2001:db8::1")
        assert url == httpx.URL("https://[2001:db8::1]:8443/v1/embeddings")
        assert headers == {"Host": "xn--bcher-kva.example:8443"}
        assert extensions == {"sni_hostname": "xn--bcher-kva.example"}
        url, headers, extensions = url_pinned("http://llm.example/v1", "93.184.215.14")
        assert (str(url), headers, extensions) == ("http://93.184.215.14/v1", {"Host": "llm.example"}, {})

    def test_pinned_requests_of_two_names_never_share_a_pool(self):
        """Two names at one address (a CDN's) get clients of their own: a connection opened
        and verified for one name is never handed to a request for the other."""
        first = addresses.pinned_client(httpx.URL("https://a.example/v1/embeddings"))
        assert addresses.pinned_client(httpx.URL("https://a.example/v1/chat/completions")) is first
        assert addresses.pinned_client(httpx.URL("https://b.example/v1/embeddings")) is not first
        assert addresses.pinned_client(httpx.URL("https://a.example:8443/v1")) is not first
        assert first is not addresses.http_client()

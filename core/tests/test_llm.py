import pytest

from core.llm import LLMError, LLMUnavailable, chat_complete, chat_complete_json
from core.services import provider_credential_set
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer


class ChatClientTests(MemoryTestCase):
    def test_without_an_endpoint_it_is_unavailable(self):
        with pytest.raises(LLMUnavailable):
            chat_complete(workspace=self.workspace, messages=[{"role": "user", "content": "hi"}])

    def test_talks_to_an_openai_compatible_server(self):
        with OpenAITestServer() as server:
            provider_credential_set(
                workspace=self.workspace, purpose="chat", base_url=server.url, model="tiny", api_key="sk-1"
            )
            server.chat_replies.append('{"entries": []}')
            assert chat_complete_json(
                workspace=self.workspace, messages=[{"role": "user", "content": "x"}]
            ) == {"entries": []}
            path, body = server.requests[0]
            assert path == "/v1/chat/completions"
            assert body["model"] == "tiny"
            assert body["response_format"] == {"type": "json_object"}

    def test_server_failure_is_an_llm_error(self):
        with OpenAITestServer() as server:
            provider_credential_set(workspace=self.workspace, purpose="chat", base_url=server.url, model="m")
            server.fail_next = 1
            with pytest.raises(LLMError):
                chat_complete(workspace=self.workspace, messages=[{"role": "user", "content": "x"}])

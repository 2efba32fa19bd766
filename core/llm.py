"""A small client for OpenAI-compatible chat endpoints (compaction, extraction, consolidation,
reflection).

`chat_complete` raises `LLMUnavailable` when neither the workspace nor the settings name
an endpoint, so callers fall back to their deterministic method; `LLMError` covers
transport failures and malformed answers, which callers retry. Every call is counted
against the workspace's daily token budget under the caller's `purpose`
(core.lib.llm_budget): past it, `LLMBudgetExceeded` (an LLMUnavailable: take the offline
method) or `LLMBudgetWait` (an LLMError: retry after `retry_at`), as the workspace's policy says.
A workspace's endpoint whose host names a private address when a request is sent is
`LLMEndpointRefused` (an LLMUnavailable: core.lib.addresses.provider_target).
"""

import json
import logging

import httpx
from django.conf import settings

from core.lib.addresses import AddressRefused, provider_target
from core.lib.llm_budget import PURPOSE_OTHER, llm_budget_check, llm_usage_record
from core.models import ProviderCredential
from core.selectors import provider_credential_get

logger = logging.getLogger(__name__)


class LLMUnavailable(Exception):
    """No chat endpoint is configured."""


class LLMError(Exception):
    """The endpoint failed or answered with something unusable."""


class LLMBudgetExceeded(LLMUnavailable):
    """The workspace's daily token budget is spent and its policy is `fallback`."""


class LLMEndpointRefused(LLMUnavailable):
    """The endpoint's host names a private, loopback or link-local address: nothing was sent.

    Callers take their offline method, as without an endpoint; retrying would ask the same
    name of the same resolver.
    """


class LLMBudgetWait(LLMError):
    """The workspace's daily token budget is spent and its policy is `wait`: retry after `retry_at`."""

    def __init__(self, message: str, *, retry_at):
        super().__init__(message)
        self.retry_at = retry_at


def chat_endpoint(*, workspace) -> dict | None:
    return provider_credential_get(workspace=workspace, purpose=ProviderCredential.Purpose.CHAT)


def chat_complete(
    *,
    workspace,
    messages: list[dict],
    json_response: bool = False,
    temperature: float = 0.0,
    max_tokens: int | None = None,
    purpose: str = PURPOSE_OTHER,
) -> str:
    """Send `messages` to the workspace's chat endpoint and return the reply's text; the
    reply's `usage` is counted into the workspace's ledger under `purpose`."""
    endpoint = chat_endpoint(workspace=workspace)
    if endpoint is None:
        raise LLMUnavailable("No OpenAI-compatible chat endpoint is configured.")
    llm_budget_check(workspace=workspace, purpose=purpose)
    payload: dict = {"model": endpoint["model"], "messages": messages, "temperature": temperature}
    if max_tokens:
        payload["max_tokens"] = max_tokens
    if json_response:
        payload["response_format"] = {"type": "json_object"}
    headers = {"Authorization": f"Bearer {endpoint['api_key']}"} if endpoint["api_key"] else {}
    try:
        target = provider_target(
            endpoint["base_url"], "/chat/completions", private_allowed=endpoint.get("private_allowed", False)
        )
    except AddressRefused as exc:
        logger.warning("Chat endpoint refused, offline methods used: %s", exc)
        raise LLMEndpointRefused(f"Chat endpoint refused: {exc}") from exc
    except (OSError, UnicodeError, ValueError, httpx.InvalidURL) as exc:
        raise LLMError(f"Chat endpoint failed: {exc}") from exc
    try:
        response = target.client.post(
            target.url,
            json=payload,
            headers={**headers, **target.headers},
            timeout=settings.LLM_TIMEOUT_SECONDS,
            extensions=target.extensions,
        )
        response.raise_for_status()
        body = response.json()
        content = body["choices"][0]["message"]["content"] or ""
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, KeyError, IndexError, TypeError) as exc:
        raise LLMError(f"Chat endpoint failed: {exc}") from exc
    # A reply the caller then finds unusable still cost its tokens.
    llm_usage_record(workspace=workspace, purpose=purpose, usage=body.get("usage"))
    return content


def chat_complete_json(*, workspace, messages: list[dict], **kwargs) -> dict:
    """Like chat_complete, parsing the reply as a JSON object (fences tolerated)."""
    text = chat_complete(workspace=workspace, messages=messages, json_response=True, **kwargs).strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text[text.find("{") :]
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        # RecursionError: arrays or objects nested a few thousand deep, which json.loads
        # gives up on; a failing endpoint like any other, for every caller.
        raise LLMError("Chat endpoint did not answer with JSON.") from exc
    if not isinstance(value, dict):
        raise LLMError("Chat endpoint answered with JSON that is not an object.")
    return value

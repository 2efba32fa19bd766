"""Every path that opens a thread records its channel the same way (threads.services.thread_channel):
the channel the request names, as identities store it (trimmed, lowercase), else the one channel
the person was identified through. A thread's channel, once set, is never changed by a resolve."""

import json

from django.urls import reverse

from core.testing import MemoryTestCase
from identities.models import ChannelIdentity, MemoryUser
from identities.services import memory_user_identify
from threads.models import Thread
from threads.services import thread_create, thread_resolve

CONTEXT = reverse("api:runtime:context")
THREADS = "/api/v1/threads/"
TOOL_CALL = "/api/v1/tools/call/"


class ThreadChannelTests(MemoryTestCase):
    def setUp(self):
        # Identified through telegram only.
        self.ada = memory_user_identify(
            workspace=self.workspace, channel="telegram", external_id="1001"
        ).memory_user

    def context(self, **body):
        body.setdefault("agent", "assistant")
        response = self.api().post(CONTEXT, body, format="json")
        assert response.status_code == 200, response.json()
        return Thread.objects.get(pk=response.json()["thread"])

    def test_context_by_channel_identity_records_the_identity_channel(self):
        """The channel as the identity stores it, with or without an appended message."""
        for append in (False, True):
            with self.subTest(append=append):
                thread = self.context(
                    channel=" Slack ", external_id=f"U-{append}", message="Hi", append=append
                )
                assert thread.channel == "slack"
                assert thread.memory_user.identities.get().channel == thread.channel

    def test_context_by_person_id_records_the_channel_they_were_identified_through(self):
        thread = self.context(memory_user=str(self.ada.pk), message="Hi", append=True)
        assert thread.channel == "telegram"

    def test_context_by_chat_id_alone_records_no_channel(self):
        thread = self.context(channel_chat_id="chat-1", message="Hi")
        assert (thread.channel, thread.channel_chat_id) == ("", "chat-1")

    def test_context_tool_records_the_channel(self):
        """The `context` tool (tools/call and MCP) opens threads through the same path."""
        for arguments, channel in (
            ({"memory_user": str(self.ada.pk)}, "telegram"),
            ({"channel": "WEB", "external_id": "w-1"}, "web"),
        ):
            with self.subTest(channel):
                call = {"name": "context", "arguments": {"agent": "assistant", "message": "Hi", **arguments}}
                response = self.api().post(TOOL_CALL, call, format="json")
                assert response.status_code == 200, response.content
                result = json.loads(response.json()["content"][0]["text"])
                assert Thread.objects.get(pk=result["thread"]).channel == channel

    def test_thread_api_create_and_resolve_record_the_channel(self):
        for resolve in (False, True):
            with self.subTest(resolve=resolve):
                named = self.api().post(
                    THREADS, {"agent": "assistant", "channel": "Email ", "resolve": resolve}, format="json"
                )
                assert named.status_code == 201, named.json()
                assert named.json()["channel"] == "email"
                by_person = self.api().post(
                    THREADS,
                    {"agent": "researcher", "memory_user": str(self.ada.pk), "resolve": resolve},
                    format="json",
                )
                assert by_person.json()["channel"] == "telegram"
                Thread.objects.filter(agent=self.other_agent).delete()

    def test_services_record_the_channel(self):
        assert thread_create(workspace=self.workspace, agent=self.agent, memory_user=self.ada).channel == (
            "telegram"
        )
        resolved = thread_resolve(
            workspace=self.workspace, agent=self.other_agent, memory_user=self.ada, channel_chat_id="c"
        )
        assert resolved.channel == "telegram"

    def test_a_person_known_on_several_channels_records_only_a_named_one(self):
        """Which of two channels the conversation is on is not known: blank, not a guess."""
        ChannelIdentity.objects.create(
            workspace=self.workspace, memory_user=self.ada, channel="email", external_id="ada@example.com"
        )
        ada = self.ada
        assert thread_create(workspace=self.workspace, agent=self.agent, memory_user=ada).channel == ""
        named = thread_create(
            workspace=self.workspace, agent=self.other_agent, memory_user=ada, channel="email"
        )
        assert named.channel == "email"

    def test_a_set_channel_is_never_changed_by_a_resolve(self):
        """The person's one thread continues across channels; it keeps the channel it opened on."""
        first = self.context(memory_user=str(self.ada.pk), message="Hi")
        assert first.channel == "telegram"
        again = self.api().post(
            THREADS,
            {"agent": "assistant", "memory_user": str(self.ada.pk), "channel": "slack", "resolve": True},
            format="json",
        )
        assert again.status_code == 200 and again.json()["id"] == str(first.pk)
        assert Thread.objects.get(pk=first.pk).channel == "telegram"

    def test_a_blank_channel_is_filled_by_the_first_resolve_that_names_one(self):
        """A thread opened without any channel known takes the first one a resolve names."""
        nobody = MemoryUser.objects.create(workspace=self.workspace, canonical_id="api:7")
        opened = thread_create(workspace=self.workspace, agent=self.agent, memory_user=nobody)
        assert opened.channel == ""
        resolved = thread_resolve(
            workspace=self.workspace, agent=self.agent, memory_user=nobody, channel="SMS"
        )
        assert resolved.pk == opened.pk and resolved.channel == "sms"
        assert Thread.objects.get(pk=opened.pk).channel == "sms"
        later = thread_resolve(workspace=self.workspace, agent=self.agent, memory_user=nobody, channel="web")
        assert later.channel == "sms" and Thread.objects.get(pk=opened.pk).channel == "sms"

    def test_the_channel_filter_finds_threads_stored_before_channels_were_lowercased(self):
        old = thread_create(workspace=self.workspace, agent=self.agent, channel="slack")
        Thread.objects.filter(pk=old.pk).update(channel="Slack")
        new = thread_create(workspace=self.workspace, agent=self.other_agent, channel="Slack")
        listed = self.api().get(THREADS, {"channel": "slack"}).json()["results"]
        assert {row["id"] for row in listed} == {str(old.pk), str(new.pk)}

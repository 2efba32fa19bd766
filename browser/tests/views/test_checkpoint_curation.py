"""A checkpoint's metadata edited on its detail page, and its state shown decoded (issue 13
item 10): JSON pretty-printed and escaped, plain msgpack decoded, anything else as hex."""

import json

import ormsgpack
from django.test import override_settings

from browser.tests.base import BrowserTestCase
from checkpoints.models import Checkpoint
from checkpoints.services import checkpoint_put
from core.models import AuditEvent
from threads.tests.factories import make_thread


class CheckpointCurationTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.thread = make_thread(workspace=cls.workspace, agent=cls.agent, title="Approval flow")
        state = {"channel_values": {"messages": ["<script>alert(1)</script>"]}, "step": 3}
        cls.json_cp = checkpoint_put(
            thread=cls.thread,
            checkpoint_id="cp-json",
            type="json",
            data=json.dumps(state).encode(),
            metadata={"source": "loop", "step": 3},
        )[0]
        cls.msgpack_cp = checkpoint_put(
            thread=cls.thread,
            checkpoint_id="cp-msgpack",
            type="msgpack",
            data=ormsgpack.packb({"v": 1, "channel_values": {"topic": "refunds"}}),
        )[0]
        # A LangGraph-style extension type (an encoded object) is not plain JSON.
        cls.ext_cp = checkpoint_put(
            thread=cls.thread,
            checkpoint_id="cp-ext",
            type="msgpack",
            data=ormsgpack.packb(ormsgpack.Ext(5, b"\x01\x02\x03")),
        )[0]
        cls.big_cp = checkpoint_put(
            thread=cls.thread,
            checkpoint_id="cp-big",
            type="json",
            data=json.dumps({"items": [f"item-{n:05d}" for n in range(3000)]}).encode(),
        )[0]
        foreign_thread = make_thread(workspace=cls.other_workspace, agent=cls.outsider_agent)
        cls.foreign = checkpoint_put(
            thread=foreign_thread, checkpoint_id="globex-cp", type="json", data=b"{}"
        )[0]

    def detail(self, checkpoint):
        return self.url("memories:checkpoint", pk=checkpoint.pk)

    def edit_url(self, checkpoint):
        return self.url("memories:checkpoint-edit", pk=checkpoint.pk)

    def state_url(self, checkpoint):
        return self.url("memories:checkpoint-state", pk=checkpoint.pk)

    # --- the state -------------------------------------------------------------------------

    def test_json_state_is_pretty_printed_and_escaped(self):
        self.login(self.viewer)
        content = self.client.get(self.detail(self.json_cp)).content.decode()
        assert "Decoded from json" in content
        assert "&quot;step&quot;: 3" in content and "&lt;script&gt;alert(1)&lt;/script&gt;" in content
        assert "<script>alert(1)" not in content

    def test_msgpack_state_is_decoded_when_plain(self):
        self.login(self.viewer)
        content = self.client.get(self.detail(self.msgpack_cp)).content.decode()
        assert "Decoded from msgpack" in content and "&quot;topic&quot;: &quot;refunds&quot;" in content

    def test_extension_types_fall_back_to_hex(self):
        self.login(self.viewer)
        content = self.client.get(self.detail(self.ext_cp)).content.decode()
        data = bytes(Checkpoint.objects.get(pk=self.ext_cp.pk).data)
        assert "Not plain msgpack" in content
        assert " ".join(f"{b:02x}" for b in data) in content

    @override_settings(CHECKPOINTS_BROWSER_PREVIEW_CHARS=500, CHECKPOINTS_BROWSER_MAX_CHARS=20_000)
    def test_large_state_is_cut_and_show_all_loads_up_to_the_cap(self):
        self.login(self.viewer)
        content = self.client.get(self.detail(self.big_cp)).content.decode()
        assert "item-00000" in content and "item-02999" not in content
        state_url = self.state_url(self.big_cp)
        assert f'hx-get="{state_url}" hx-target="#checkpoint-state"' in content
        fragment = self.htmx("get", state_url, target="checkpoint-state").content.decode()
        assert "<html" not in fragment and 'id="checkpoint-state"' in fragment
        assert "item-00500" in fragment and "item-02999" not in fragment
        assert "the most one page shows" in fragment and "Show all" not in fragment
        # Without JavaScript the link opens a page of its own, under the same cap.
        page = self.client.get(state_url).content.decode()
        assert "<html" in page and "State of checkpoint" in page and "item-02999" not in page
        with self.settings(CHECKPOINTS_BROWSER_MAX_CHARS=1_000_000):
            whole = self.htmx("get", state_url, target="checkpoint-state").content.decode()
        assert "item-02999" in whole and "the most one page shows" not in whole

    def test_state_is_read_only_for_every_role_and_scoped(self):
        self.login(self.viewer)
        assert self.client.get(self.state_url(self.json_cp)).status_code == 200
        assert self.client.post(self.state_url(self.json_cp)).status_code == 405
        self.login(self.outsider)
        assert self.client.get(self.state_url(self.json_cp)).status_code == 404
        self.login(self.owner)
        assert self.client.get(self.state_url(self.foreign)).status_code == 404

    # --- the metadata ----------------------------------------------------------------------

    def test_editor_edits_metadata_inline(self):
        self.login(self.teammate)
        detail = self.client.get(self.detail(self.json_cp)).content.decode()
        assert 'hx-target="#checkpoint-metadata"' in detail
        form = self.htmx("get", self.edit_url(self.json_cp), target="checkpoint-metadata")
        assert b"<html" not in form.content and b"&quot;source&quot;: &quot;loop&quot;" in form.content
        response = self.htmx(
            "post",
            self.edit_url(self.json_cp),
            {"metadata": '{"source": "update", "note": "<b>checked</b>"}'},
            target="checkpoint-metadata",
        )
        assert "Saved metadata" in response["HX-Trigger"]
        assert (
            b"&lt;b&gt;checked&lt;/b&gt;" in response.content
            and b'id="checkpoint-metadata"' in response.content
        )
        checkpoint = Checkpoint.objects.get(pk=self.json_cp.pk)
        assert checkpoint.metadata == {"source": "update", "note": "<b>checked</b>"}
        assert bytes(checkpoint.data) == bytes(self.json_cp.data)
        event = AuditEvent.objects.get(entity_type="checkpoint", entity_id=str(checkpoint.pk))
        assert event.action == "update" and event.actor == "operator:teammate"

    def test_without_javascript_a_page_then_a_redirect(self):
        self.login(self.owner)
        page = self.client.get(self.edit_url(self.msgpack_cp))
        assert b"<html" in page.content and b"Edit metadata" in page.content
        response = self.client.post(self.edit_url(self.msgpack_cp), {"metadata": ""})
        assert response.status_code == 302 and response["Location"] == self.detail(self.msgpack_cp)
        assert Checkpoint.objects.get(pk=self.msgpack_cp.pk).metadata == {}

    def test_hostile_metadata_shows_the_form_again(self):
        self.login(self.teammate)
        cases = {
            "bad JSON": ("{nope", "This is not valid JSON."),
            "not an object": ("[1, 2]", "Metadata must be a JSON object"),
            "NUL": ('{"a": "\\u0000"}', "NUL"),
            "lone surrogate": ('{"a": "\\ud800"}', "surrogate"),
            "too deep": ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", "nested deeper than"),
        }
        for name, (metadata, message) in cases.items():
            with self.subTest(name):
                for target in ("checkpoint-metadata", None):
                    data = {"metadata": metadata}
                    if target:
                        response = self.htmx("post", self.edit_url(self.json_cp), data, target=target)
                    else:
                        response = self.client.post(self.edit_url(self.json_cp), data)
                    # A plain form post answers the refusal's 400 (browser.lib.rendering.refused).
                    assert response.status_code == (200 if target else 400)
                    assert message in response.content.decode() and b'class="error"' in response.content
        assert Checkpoint.objects.get(pk=self.json_cp.pk).metadata == {"source": "loop", "step": 3}

    def test_viewer_gets_403_and_no_control(self):
        self.login(self.viewer)
        assert b"Edit metadata" not in self.client.get(self.detail(self.json_cp)).content
        assert self.client.get(self.edit_url(self.json_cp)).status_code == 403
        assert self.client.post(self.edit_url(self.json_cp), {"metadata": "{}"}).status_code == 403
        assert Checkpoint.objects.get(pk=self.json_cp.pk).metadata == {"source": "loop", "step": 3}

    def test_outsider_gets_404(self):
        self.login(self.outsider)
        assert self.client.post(self.edit_url(self.json_cp), {"metadata": "{}"}).status_code == 404
        foreign_workspace_url = self.edit_url(self.json_cp).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert self.client.post(foreign_workspace_url, {"metadata": "{}"}).status_code == 404
        assert Checkpoint.objects.get(pk=self.json_cp.pk).metadata == {"source": "loop", "step": 3}

"""What an export holds: its workspace only; an agent's or a person's rows only."""

from django.test import TestCase

from core.tests.reliability.routes import A1_SLUG, seed_world
from portability.registry import Scope
from portability.tests.helpers import export_bytes, records


class ScopeTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.world = seed_world()

    def test_a_workspace_export_holds_no_row_of_another_workspace(self):
        w = self.world
        text = export_bytes(Scope(workspace=w.w2, history=True, vectors=True)).decode()
        for secret in w.w1_ids:
            assert secret not in text
        text = export_bytes(Scope(workspace=w.w1, history=True, vectors=True)).decode()
        assert str(w.w2_agent.pk) not in text

    def test_an_agent_export_holds_only_that_agent(self):
        w = self.world
        rows = records(export_bytes(Scope(workspace=w.w1, agent=w.a2, history=True)))
        text = "\n".join(map(str, rows))
        assert [r["slug"] for r in rows if r.get("type") == "agent"] == [w.a2.slug]
        for secret in w.a1_ids:
            assert secret not in text, secret
        threads = [r for r in rows if r.get("type") == "thread"]
        assert [t["id"] for t in threads] == [str(w.a2_thread.pk)]
        assert not [r for r in rows if r.get("type") == "audit_event"]

    def test_a_person_export_holds_their_rows_and_the_agents_they_need(self):
        w = self.world
        rows = records(export_bytes(Scope(workspace=w.w1, memory_user=w.p2)))
        people = [r["canonical_id"] for r in rows if r.get("type") == "memory_user"]
        assert people == [w.p2.canonical_id]
        assert {r["slug"] for r in rows if r.get("type") == "agent"} == {w.a2.slug}
        assert str(w.thread.pk) not in str(rows)
        rows = records(export_bytes(Scope(workspace=w.w1, memory_user=w.p1)))
        assert {r["slug"] for r in rows if r.get("type") == "agent"} == {A1_SLUG}
        assert {r["key"] for r in rows if r.get("type") == "fact"} == {"timezone", "city"}

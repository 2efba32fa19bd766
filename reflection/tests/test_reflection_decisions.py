"""Reflection against what happens around it: a chat model that would retire what the person
said on an assistant's word, a `wait` budget spent in the middle of a batch, and a kept entry
deleted while the run was deciding (docs/reflection.md)."""

import json
from datetime import timedelta
from unittest import mock

from django.test import override_settings
from django.utils import timezone

from core.models import AuditEvent, LLMBudget
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_chat, use_test_embeddings
from reflection import services
from reflection.models import ReflectionRun
from reflection.services import REFLECTION_ACTOR, reflection_run_step, reflection_start, reflection_sweep


def answer(decision):
    def reply(body):
        if "compact profile" in body["messages"][0]["content"]:
            return json.dumps({"profile": "- lives in Porto"})
        return json.dumps({"decision": decision, "reason": "The model says so."})

    return reply


class ReflectionSafetyTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.ada = memory_user_factory(self.workspace, display_name="Ada")

    def pair(self, person, old, new, *, new_source=EpisodicEntry.Source.USER_ASSERTION):
        now = timezone.now()
        first = entry_factory(agent=self.agent, memory_user=person, content=old)
        second = entry_factory(agent=self.agent, memory_user=person, content=new, source=new_source)
        EpisodicEntry.objects.filter(pk=first.pk).update(created_at=now - timedelta(days=2))
        EpisodicEntry.objects.filter(pk=second.pk).update(created_at=now - timedelta(days=1))
        return first, second

    def run_once(self):
        run, _ = reflection_start(agent=self.agent, trigger="api", actor="test")
        reflection_run_step(run_id=run.pk)
        run.refresh_from_db()
        return run

    def test_the_models_supersede_never_retires_what_the_person_said_for_an_assistants_finding(self):
        use_test_chat(self.server, self.workspace)
        said, found = self.pair(
            self.ada,
            "Ada lives in Lisbon.",
            "Ada lives in Porto.",
            new_source=EpisodicEntry.Source.VERIFIED_FINDING,
        )
        for decision in ("supersede", "update"):
            self.server.chat_handler = answer(decision)
            run = self.run_once()
            assert run.state == "done", run.error
            assert EpisodicEntry.objects.get(pk=said.pk).status == "active", decision
            assert EpisodicEntry.objects.get(pk=found.pk).status == "active", decision
            assert not AuditEvent.objects.filter(actor=REFLECTION_ACTOR, entity_id=str(said.pk)).exists()

    @override_settings(REFLECTION_BATCH=20)
    def test_a_wait_budget_spent_within_a_batch_defers_the_rest_instead_of_degrading_it(self):
        """The budget is checked before each batch; the call that crosses it is allowed, and the
        next person of the same batch must wait for the budget, not be decided by the rules."""
        use_test_chat(self.server, self.workspace)
        self.server.chat_handler = answer("supersede")
        bo = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        self.pair(self.ada, "Ada lives in Lisbon.", "Ada lives in Porto.")
        bo_old, bo_new = self.pair(bo, "Bo lives in Oslo.", "Bo lives in Bergen.")
        budget = LLMBudget.objects.create(workspace=self.workspace, daily_tokens=1, policy="wait")
        run = self.run_once()
        assert run.state == "waiting", (run.state, run.progress_done, run.error)
        by_rule = AuditEvent.objects.filter(actor=REFLECTION_ACTOR, changes__by="rule")
        assert not by_rule.exists(), [e.changes["reason"] for e in by_rule]
        assert EpisodicEntry.objects.get(pk=bo_old.pk).status == "active"
        budget.daily_tokens = 1_000_000
        budget.save()
        with self.captureOnCommitCallbacks(execute=True):
            reflection_sweep(now=run.resume_after + timedelta(seconds=1))
        run.refresh_from_db()
        assert (run.state, run.progress_done, run.retired) == ("done", 2, 2)
        assert not by_rule.exists()
        closed = EpisodicEntry.objects.get(pk=bo_old.pk)
        assert (closed.status, closed.superseded_by_id) == ("superseded", bo_new.pk)

    def test_a_kept_entry_deleted_while_the_run_decides_leaves_its_twin_in_memory(self):
        kept = entry_factory(agent=self.agent, memory_user=self.ada, content="Ada drinks green tea.")
        twin = entry_factory(agent=self.agent, memory_user=self.ada, content="Ada drinks green tea.")
        EpisodicEntry.objects.filter(pk=kept.pk).update(created_at=timezone.now() - timedelta(days=1))
        decide = services._reflect_person

        def decide_then_delete(run, person_id):
            result = decide(run, person_id)
            EpisodicEntry.objects.filter(pk=kept.pk).delete()  # the person asked to forget it
            return result

        with mock.patch.object(services, "_reflect_person", decide_then_delete):
            run = self.run_once()
        assert run.state == "done", run.error
        survivor = EpisodicEntry.objects.get(pk=twin.pk)
        assert (survivor.status, survivor.superseded_by_id, survivor.valid_to) == ("active", None, None)
        assert run.merged == 0
        assert ReflectionRun.objects.get(pk=run.pk).progress_done == 1

"""A review decision on a learned procedure takes every advisory key it needs (the lineage the
proposal is in, the lineage an edited name moves it into, the proposal's learned signature) in
the first call of procedures.services.procedure_lineage_lock. A later call for a key lower than
one held waits while holding it: a second locker holding that lower key and waiting for a held
one then deadlocks with the decision (PostgreSQL aborts one of them: an API 503).

A proposal renamed between the decision's read and its lock is decided again from the start on
its new name, with its locks released in between, instead of locking the new lineage second."""

import threading

from django.db import connection, transaction
from django.test import TestCase, TransactionTestCase

from core.access import Principal
from core.errors import ApplicationError
from core.models import AuditEvent
from core.services import agent_get_or_create, workspace_create
from core.testing import statements_sent, thread_started
from procedures.models import Procedure
from procedures.services import procedure_create, procedure_update
from procedures.services.procedures import _lineage_key, _signature_key
from procedures.tests.factories import proposal_create
from review.selectors import TIER_PROCEDURE
from review.services import DECIDE_ATTEMPTS, ITEM_CHANGED, review_approve, review_reject
from review.tests.test_procedure_decision_locks import until_backends_wait

ADVISORY = "pg_advisory_xact_lock"


def decisions(procedure: Procedure) -> list:
    return list(
        AuditEvent.objects.filter(entity_type="procedure", entity_id=str(procedure.pk))
        .exclude(changes__review=None)
        .values_list("changes__review", flat=True)
    )


class AdvisoryKeysOfOneDecisionTests(TestCase):
    """The advisory lock statements one decision sends: the first asks every key; any later one
    (procedure_update's own, for the lineage it activates into) asks only keys already held,
    which PostgreSQL grants at once to the session holding them."""

    @classmethod
    def setUpTestData(cls):
        cls.workspace = workspace_create(name="Acme")
        cls.agent = agent_get_or_create(workspace=cls.workspace, slug="assistant")
        cls.principal = Principal(workspace=cls.workspace, role="editor")

    def key(self, name: str) -> int:
        return _lineage_key(self.workspace.pk, str(self.agent.pk), name)

    def advisory_calls(self, decide) -> list[set]:
        with statements_sent(ADVISORY) as sent:
            decide()
        return [set(params[0]) for _, params in sent]

    def assert_first_call_holds(self, calls: list[set], keys: set) -> None:
        assert calls, "the decision took no advisory lock"
        assert calls[0] == keys
        for later in calls[1:]:
            assert later <= calls[0], "a later advisory call asks a key the first did not take"

    def test_an_approval_with_a_new_name_takes_both_lineages_and_the_signature_at_once(self):
        """Old name, new name and learned signature are in the first advisory call."""
        proposal = proposal_create(
            workspace=self.workspace, agent=self.agent, name="Learned: deploy", signature="task:deploy"
        )
        calls = self.advisory_calls(
            lambda: review_approve(
                principal=self.principal,
                tier=TIER_PROCEDURE,
                item_id=proposal.pk,
                edits={"name": "  Deploy  "},
            )
        )
        signature = _signature_key(self.workspace.pk, str(self.agent.pk), "task:deploy")
        self.assert_first_call_holds(calls, {self.key("Learned: deploy"), self.key("Deploy"), signature})
        proposal.refresh_from_db()
        assert (proposal.name, proposal.is_active) == ("Deploy", True)
        assert decisions(proposal) == ["approved"]

    def test_an_approval_without_edits_takes_its_lineage_and_signature_at_once(self):
        proposal = proposal_create(
            workspace=self.workspace, agent=self.agent, name="Learned: ship", signature="task:ship"
        )
        calls = self.advisory_calls(
            lambda: review_approve(principal=self.principal, tier=TIER_PROCEDURE, item_id=proposal.pk)
        )
        signature = _signature_key(self.workspace.pk, str(self.agent.pk), "task:ship")
        self.assert_first_call_holds(calls, {self.key("Learned: ship"), signature})
        proposal.refresh_from_db()
        assert proposal.is_active

    def test_a_rejection_takes_one_advisory_call(self):
        """A rejection changes no lineage: one call, for the proposal's lineage and signature."""
        proposal = proposal_create(
            workspace=self.workspace, agent=self.agent, name="Learned: noise", signature="task:noise"
        )
        calls = self.advisory_calls(
            lambda: review_reject(
                principal=self.principal, tier=TIER_PROCEDURE, item_id=proposal.pk, reason="noise"
            )
        )
        signature = _signature_key(self.workspace.pk, str(self.agent.pk), "task:noise")
        assert calls == [{self.key("Learned: noise"), signature}]
        assert decisions(proposal) == ["rejected"]

    def test_a_proposal_without_a_signature_locks_its_lineages_only(self):
        proposal = proposal_create(workspace=self.workspace, agent=self.agent, name="Taught")
        calls = self.advisory_calls(
            lambda: review_approve(
                principal=self.principal, tier=TIER_PROCEDURE, item_id=proposal.pk, edits={"name": "Ship"}
            )
        )
        self.assert_first_call_holds(calls, {self.key("Taught"), self.key("Ship")})


class RenamedBetweenReadAndLockTests(TransactionTestCase):
    """Proposal P is read as "X" by an approval that then waits for X's key; meanwhile P is
    renamed "Y" (a held proposal is inactive, so its rename takes no lineage lock), and a second
    approval, renaming proposal Q from "Y" to "X", takes Y's key (lower than X's) and waits for
    X's. Locking Y second, the first approval waited for the second while holding X: a deadlock."""

    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.principal = Principal(workspace=self.workspace, role="editor")
        self.x, self.y = self.names_in_key_order()
        self.p = proposal_create(workspace=self.workspace, agent=self.agent, name=self.x, version=2)
        self.q = proposal_create(workspace=self.workspace, agent=self.agent, name=self.y, version=3)

    def names_in_key_order(self) -> tuple[str, str]:
        """Two names whose keys differ, the second's lower than the first's."""
        key = lambda name: _lineage_key(self.workspace.pk, str(self.agent.pk), name)  # noqa: E731
        x = "Deploy"
        y = next(f"Ship {n}" for n in range(1000) if key(f"Ship {n}") < key(x))
        return x, y

    def test_both_approvals_complete_and_each_lands_in_its_lineage(self):
        held, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def holder():
            # Another writer of lineage X (its advisory key only), still open.
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"SELECT {ADVISORY}(%s)",
                        [_lineage_key(self.workspace.pk, str(self.agent.pk), self.x)],
                    )
                held.set()
                release.wait(30)

        holder_thread = thread_started(holder, errors)
        assert held.wait(30)
        approve_p = thread_started(
            lambda: review_approve(principal=self.principal, tier=TIER_PROCEDURE, item_id=self.p.pk), errors
        )
        until_backends_wait(1, timeout=10)
        # Read as X, renamed before it is locked.
        procedure_update(procedure=Procedure.objects.get(pk=self.p.pk), actor="operator", name=self.y)
        approve_q = thread_started(
            lambda: review_approve(
                principal=self.principal, tier=TIER_PROCEDURE, item_id=self.q.pk, edits={"name": self.x}
            ),
            errors,
        )
        until_backends_wait(2, timeout=10)
        release.set()
        for thread in (holder_thread, approve_p, approve_q):
            thread.join(30)

        assert errors == []
        rows = Procedure.objects.filter(workspace=self.workspace).order_by("version")
        assert list(rows.values_list("pk", "name", "is_active")) == [
            (self.p.pk, self.y, True),
            (self.q.pk, self.x, True),
        ]
        assert decisions(self.p) == ["approved"]
        assert decisions(self.q) == ["approved"]


class RenamedBeforeEachLockTests(TransactionTestCase):
    """Another connection renames the proposal right before the decision's advisory lock
    statement, after the decision read it."""

    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.principal = Principal(workspace=self.workspace, role="editor")
        self.proposal = proposal_create(
            workspace=self.workspace, agent=self.agent, name="Learned: deploy", signature="task:deploy"
        )

    def renaming(self, names: list[str]):
        """An execute_wrapper renaming the proposal to the next of `names`, committed on its own
        connection, before each advisory lock statement; the (sql, params) of those statements
        are appended to its `sent`."""
        pending = list(names)

        def rename(name):
            procedure_update(
                procedure=Procedure.objects.get(pk=self.proposal.pk), actor="operator", name=name
            )

        def wrapper(execute, sql, params, many, context):
            if ADVISORY in sql:
                wrapper.sent.append(params[0])
                if pending:
                    errors: list[BaseException] = []
                    thread_started(lambda: rename(pending.pop(0)), errors).join(30)
                    assert errors == []
            return execute(sql, params, many, context)

        wrapper.sent = []
        return wrapper

    def test_a_rename_before_the_lock_is_decided_on_the_new_name(self):
        """The attempt on the old name is rolled back and the approval runs again on the name
        the proposal has now: it becomes that lineage's active version, its earlier version
        steps down, and one decision is audited."""
        ship = procedure_create(
            workspace=self.workspace,
            agent=self.agent,
            name="Ship",
            procedure_type="prompt_template",
            content="s",
        )
        wrapper = self.renaming(["Ship"])
        with connection.execute_wrapper(wrapper):
            review_approve(principal=self.principal, tier=TIER_PROCEDURE, item_id=self.proposal.pk)
        self.proposal.refresh_from_db()
        ship.refresh_from_db()
        assert (self.proposal.name, self.proposal.is_active) == ("Ship", True)
        assert not ship.is_active
        assert decisions(self.proposal) == ["approved"]
        key = lambda name: _lineage_key(self.workspace.pk, str(self.agent.pk), name)  # noqa: E731
        signature = _signature_key(self.workspace.pk, str(self.agent.pk), "task:deploy")
        # The first attempt's statement, then the second attempt's (all its keys at once) and
        # procedure_update's, for a key the second held already.
        first, second, *later = [set(keys) for keys in wrapper.sent]
        assert first == {key("Learned: deploy"), signature}
        assert second == {key("Ship"), signature}
        assert all(keys <= second for keys in later)

    def test_a_proposal_renamed_on_every_attempt_is_a_conflict_and_stays_held(self):
        """After DECIDE_ATTEMPTS renames the decision gives up with a 409: nothing is decided,
        and the last rename is kept."""
        names = [f"Renamed {n}" for n in range(DECIDE_ATTEMPTS)]
        with (
            connection.execute_wrapper(self.renaming(names)),
            self.assertRaisesMessage(ApplicationError, ITEM_CHANGED) as raised,
        ):
            review_approve(principal=self.principal, tier=TIER_PROCEDURE, item_id=self.proposal.pk)
        assert raised.exception.status_code == 409
        self.proposal.refresh_from_db()
        assert (self.proposal.name, self.proposal.is_active) == (names[-1], False)
        assert decisions(self.proposal) == []

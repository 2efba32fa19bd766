"""A learned signature (agent, learned_signature) is held like a lineage: a learning pass that
proposes a signature another transaction is storing meanwhile (an import, another pass) waits
for it, then leaves the signature to the stored procedure instead of failing the whole pass on
the unique constraint procedures_learned_signature."""

import threading
from datetime import timedelta

from django.core.cache import cache
from django.db import connection, transaction
from django.test import TransactionTestCase
from django.utils import timezone

from core.services import agent_get_or_create, workspace_create
from core.testing import thread_started, until_a_backend_waits
from episodes.services.records import episode_create
from procedures.models import Procedure
from procedures.services import episode_signature, procedure_create, procedures_learn
from procedures.services.learning import NUDGE_KEY
from procedures.services.procedures import LINEAGE_LOCK_BUCKETS, _bucket_key

SIGNATURE = "chat|goal:order refund"


class LearningPassSignatureRaceTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        # The passes are run by the tests: the commits of these episodes queue none.
        cache.set(NUDGE_KEY.format(workspace_id=self.workspace.pk), 1, 600)
        self.addCleanup(cache.delete, NUDGE_KEY.format(workspace_id=self.workspace.pk))
        start = timezone.now() - timedelta(hours=1)
        self.episodes = []
        for n, goal in enumerate(["Refund order 4411", "refund the order 5522", "Order 9 refund"]):
            episode = episode_create(
                workspace=self.workspace,
                agent=self.agent,
                trigger_type="chat",
                input={"goal": goal},
                actions=[{"tool": "lookup_order"}, {"tool": "refund_order"}],
                outcome="success",
                final_output="Refunded",
                started_at=start + timedelta(minutes=n),
                ended_at=start + timedelta(minutes=n, seconds=30),
            )
            self.episodes.append(episode.pk)

    def test_a_pass_proposing_a_signature_stored_meanwhile_waits_and_leaves_it_to_that_row(self):
        """Another transaction stores the signature under its own name while the pass runs:
        the pass waits for it, proposes nothing (no 409 out of the pass), and the next pass
        counts the episodes as runs of the stored procedure."""
        created, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []
        results = []

        def store():
            with transaction.atomic():
                procedure_create(
                    workspace=self.workspace,
                    agent=self.agent,
                    name="Refund",
                    procedure_type="prompt_template",
                    content="Refund it.",
                    origin="self_learned",
                    source_episode_ids=self.episodes[:1],
                    learned_signature=SIGNATURE,
                )
                created.set()
                release.wait(30)

        store_thread = thread_started(store, errors)
        assert created.wait(30)
        learn_thread = thread_started(
            lambda: results.append(procedures_learn(workspace=self.workspace)), errors
        )
        until_a_backend_waits(timeout=10)
        release.set()
        store_thread.join(30)
        learn_thread.join(30)

        assert errors == []
        (result,) = results
        assert result.proposed == []
        rows = Procedure.objects.filter(workspace=self.workspace)
        assert list(rows.values_list("name", "learned_signature")) == [("Refund", SIGNATURE)]
        again = procedures_learn(workspace=self.workspace)
        assert (again.proposed, again.runs_counted) == ([], 3)
        assert rows.get().success_count == 3

    def test_a_pass_with_a_proposal_takes_its_locks_in_one_call_before_any_procedure_row(self):
        """The pass counts a run of a stored procedure and proposes another: the proposal's
        lineage and signature are held in one advisory lock call before the pass writes any
        procedure row, so the pass never holds a row that a lock holder (an import holding every
        lineage key, then locking the versions it brings) waits for while it waits for that
        holder."""
        booked = episode_create(
            workspace=self.workspace,
            agent=self.agent,
            trigger_type="chat",
            input={"goal": "Book a table"},
            outcome="success",
            started_at=timezone.now() - timedelta(minutes=5),
            ended_at=timezone.now() - timedelta(minutes=4),
        )
        booking = procedure_create(
            workspace=self.workspace,
            agent=self.agent,
            name="Book a table",
            procedure_type="prompt_template",
            content="Book it.",
            origin="self_learned",
            source_episode_ids=[booked.pk],
            learned_signature=str(
                episode_signature(trigger_type="chat", trigger_payload={}, input={"goal": "Book a table"})
            ),
        )
        statements: list[tuple[str, object]] = []

        def capture(execute, sql, params, many, context):
            if "pg_advisory_xact_lock" in sql or sql.lstrip().upper().startswith(("INSERT", "UPDATE")):
                statements.append((sql, params))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(capture):
            result = procedures_learn(workspace=self.workspace)

        assert len(result.proposed) == 1
        assert result.runs_counted == 4  # the proposal's three and one of the stored procedure
        booking.refresh_from_db()
        assert booking.success_count == 1
        first_procedure_write = next(
            i for i, (sql, _) in enumerate(statements) if '"procedures_procedure"' in sql.split("(")[0]
        )
        advisory = [i for i, (sql, _) in enumerate(statements) if "pg_advisory_xact_lock" in sql]
        assert advisory and advisory[0] < first_procedure_write
        keys = {_bucket_key(self.workspace.pk, b) for b in range(LINEAGE_LOCK_BUCKETS)}
        assert set(statements[advisory[0]][1][0]) <= keys

"""Threads of a record merged two hops back (older data: Ann merged into Bo, later Bo into Cy,
before merges re-pointed the records merged into their source). The thread list filter and
thread resolution followed the chain one hop: Ann's thread was neither listed under Cy nor
continued for Cy, and resolution started a second thread."""

from core.testing import MemoryTestCase
from identities.models import MemoryUser
from threads.filters import ThreadFilter
from threads.models import Thread
from threads.services import thread_resolve
from threads.tests.factories import make_thread


class MergeChainThreadTests(MemoryTestCase):
    def setUp(self):
        people = [MemoryUser.objects.create(workspace=self.workspace, canonical_id=f"web:{n}") for n in "abc"]
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=people[0])
        self.bo_thread = make_thread(
            workspace=self.workspace, agent=self.other_agent, memory_user=people[1], title="Bo's"
        )
        for person, into in zip(people[:-1], people[1:], strict=True):
            MemoryUser.objects.filter(pk=person.pk).update(merged_into=into)
        self.ann, self.bo, self.cy = MemoryUser.objects.order_by("canonical_id")
        self.stranger = make_thread(
            workspace=self.workspace,
            agent=self.agent,
            memory_user=MemoryUser.objects.create(workspace=self.workspace, canonical_id="web:d"),
        )

    def listed(self, person) -> set:
        filterset = ThreadFilter(
            {"memory_user": str(person.pk)}, queryset=Thread.objects.all(), workspace=self.workspace
        )
        assert filterset.is_valid(), filterset.errors
        return set(filterset.qs.values_list("pk", flat=True))

    def test_the_filter_lists_the_threads_of_every_record_merged_along_the_chain(self):
        """Listed under Cy, and under Ann or Bo (followed to Cy): Ann's thread and Bo's."""
        both = {self.thread.pk, self.bo_thread.pk}
        assert self.listed(self.cy) == both
        assert self.listed(self.ann) == both
        assert self.listed(self.bo) == both

    def test_the_filter_reads_a_fixed_number_of_queries_whatever_the_chain(self):
        """The person, the end of the chain, then the threads with the records merged into it
        as their subquery: two hops cost what one does (before, one query a hop)."""
        for person in (self.ann, self.bo):
            with self.assertNumQueries(3):
                self.listed(person)

    def test_the_api_lists_the_threads_of_a_record_merged_two_hops_back(self):
        response = self.api().get("/api/v1/threads/", {"memory_user": str(self.cy.pk)})
        assert response.status_code == 200
        body = response.json()
        rows = body["results"] if isinstance(body, dict) else body
        assert {row["id"] for row in rows} == {str(self.thread.pk), str(self.bo_thread.pk)}

    def test_resolution_continues_the_thread_of_a_record_merged_two_hops_back(self):
        """Cy's conversation with the agent continues Ann's thread, not a new one, whichever
        record of the chain the caller names."""
        for person in (self.cy, self.ann, self.bo):
            thread = thread_resolve(workspace=self.workspace, agent=self.agent, memory_user=person)
            assert thread.pk == self.thread.pk
        assert Thread.objects.filter(agent=self.agent).count() == 2

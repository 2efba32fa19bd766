"""Batch delete answers alike on every tab that has one (browser.lib.tabs.tab_delete).

The episodes tab refused a selection holding one id deleted meanwhile with a 404 and kept the
rest, while the entries tab deleted the rest and said how many were already gone. Now every tab
deletes the selected rows that are still there and says how many were gone; an id of another
workspace answers exactly as one that never existed, and nothing of that workspace is touched.
A selection of which nothing is left is a 404, and a malformed id a 400, shown in place.
"""

import uuid

from browser.tests.base import BrowserTestCase
from browser.tests.factories import entry_make, memory_user_make
from checkpoints.models import Checkpoint
from checkpoints.services import checkpoint_put
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from episodic.models import EpisodicEntry
from facts.models import Fact
from facts.services import fact_remember
from identities.models import MemoryUser
from procedures.models import Procedure
from procedures.tests.factories import ProcedureFactory
from store.models import StoreItem
from store.tests.factories import make_item
from threads.models import Thread
from threads.tests.factories import make_thread


def _agent(case, workspace):
    return case.agent if workspace == case.workspace else case.outsider_agent


# slug -> (model, make(case, workspace, n) -> row)
TABS = {
    "facts": (
        Fact,
        lambda case, ws, n: fact_remember(workspace=ws, key=f"key{n}", value="v", scope="global").fact,
    ),
    "episodes": (Episode, lambda case, ws, n: EpisodeFactory(agent=_agent(case, ws))),
    "entries": (
        EpisodicEntry,
        lambda case, ws, n: entry_make(
            agent=_agent(case, ws),
            memory_user=memory_user_make(ws, canonical_id=f"telegram:{n}"),
            content=f"Ada moved to Lisbon in month {n}.",
        ),
    ),
    "threads": (Thread, lambda case, ws, n: make_thread(workspace=ws, agent=_agent(case, ws))),
    "checkpoints": (
        Checkpoint,
        lambda case, ws, n: checkpoint_put(
            thread=make_thread(workspace=ws, agent=_agent(case, ws)),
            checkpoint_id=f"cp-{n}",
            type="json",
            data=b"{}",
        )[0],
    ),
    "procedures": (Procedure, lambda case, ws, n: ProcedureFactory(workspace=ws, agent=_agent(case, ws))),
    "store": (StoreItem, lambda case, ws, n: make_item(workspace=ws, agent=_agent(case, ws), key=f"k{n}")),
    "users": (MemoryUser, lambda case, ws, n: memory_user_make(ws, canonical_id=f"slack:U{n}")),
}


class BatchDeleteCase(BrowserTestCase):
    slug = ""

    def setUp(self):
        self.model, self.maker = TABS[self.slug]
        self.counter = 0
        # The owner: the users tab's batch delete is an erasure, for admins only.
        self.login(self.owner)
        self.delete_url = self.url(f"memories:{self.slug}-delete")

    def make(self, workspace=None):
        self.counter += 1
        return self.maker(self, workspace or self.workspace, self.counter)

    def exists(self, row) -> bool:
        return self.model.objects.filter(pk=row.pk).exists()

    def post(self, ids, *, htmx: bool):
        data = {"ids": [str(pk) for pk in ids], "confirmed": "on"}
        if htmx:
            return self.htmx("post", self.delete_url, data, target="results")
        return self.client.post(self.delete_url, data)

    def said(self, response, *, htmx: bool) -> str:
        if htmx:
            return response["HX-Trigger"]
        return " ".join(str(m) for m in response.wsgi_request._messages)

    def test_ids_deleted_meanwhile_are_counted_and_the_rest_deleted(self):
        for htmx in (False, True):
            kept, gone = self.make(), self.make()
            self.model.objects.filter(pk=gone.pk).delete()  # another operator, meanwhile

            response = self.post([kept.pk, gone.pk], htmx=htmx)

            assert response.status_code == (200 if htmx else 302), (htmx, response.status_code)
            assert not self.exists(kept), htmx
            assert "1 was already gone." in self.said(response, htmx=htmx), htmx

    def test_an_id_of_another_workspace_answers_as_one_that_never_existed(self):
        foreign = self.make(self.other_workspace)
        answers = []
        for other in (foreign.pk, uuid.uuid4()):
            own = self.make()
            response = self.post([own.pk, other], htmx=True)
            assert response.status_code == 200
            assert not self.exists(own)
            assert str(other) not in response.content.decode()
            answers.append(self.said(response, htmx=True))
        assert answers[0] == answers[1] and "1 was already gone." in answers[0]
        assert self.exists(foreign)

    def test_a_selection_with_nothing_left_is_a_404_in_place_and_deletes_nothing(self):
        own, foreign = self.make(), self.make(self.other_workspace)
        for htmx in (False, True):
            response = self.post([foreign.pk, uuid.uuid4()], htmx=htmx)
            body = response.content.decode()
            assert response.status_code == (200 if htmx else 404), (htmx, response.status_code)
            assert 'data-refusal="not_found"' in body, htmx
            assert "nothing was deleted" in self.said(response, htmx=htmx), htmx
            assert str(foreign.pk) not in body
        assert self.exists(own) and self.exists(foreign)

    def test_malformed_ids_are_a_400_in_place_and_delete_nothing(self):
        own = self.make()
        for value in ("not-a-uuid", "12", "\x00", "9" * 5000, "' OR 1=1 --"):
            for htmx in (False, True):
                data = {"ids": [str(own.pk), value], "confirmed": "on"}
                if htmx:
                    response = self.htmx("post", self.delete_url, data, target="results")
                else:
                    response = self.client.post(self.delete_url, data)
                assert response.status_code == (200 if htmx else 400), (value, htmx, response.status_code)
                assert 'data-refusal="invalid"' in response.content.decode(), (value, htmx)
        assert self.exists(own)


for _slug in TABS:
    _name = f"{_slug.title()}BatchDeleteTests"
    globals()[_name] = type(_name, (BatchDeleteCase,), {"slug": _slug, "__module__": __name__})
del BatchDeleteCase

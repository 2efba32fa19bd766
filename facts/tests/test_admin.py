from django.contrib.auth import get_user_model

from core.models import AuditEvent
from core.testing import MemoryTestCase
from facts.models import Fact
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory


class FactAdminTests(MemoryTestCase):
    def setUp(self):
        self.superuser = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")
        self.client.force_login(self.superuser)

    def test_changelist_has_no_n_plus_one(self):
        for n in range(3):
            person = MemoryUserFactory(workspace=self.workspace)
            fact_remember(workspace=self.workspace, key=f"k{n}", value=n, scope="user", memory_user=person)
        self.client.get("/admin/facts/fact/")
        with self.assertNumQueries(5):  # session, user, workspace filter choices, count, page
            response = self.client.get("/admin/facts/fact/")
        assert response.status_code == 200
        for n in range(3, 10):
            person = MemoryUserFactory(workspace=self.workspace)
            fact_remember(workspace=self.workspace, key=f"k{n}", value=n, scope="user", memory_user=person)
        with self.assertNumQueries(5):
            assert self.client.get("/admin/facts/fact/").status_code == 200
        assert self.client.get("/admin/facts/factkey/").status_code == 200

    def test_editing_the_value_supersedes_through_the_service(self):
        fact = fact_remember(workspace=self.workspace, key="city", value="Paris", scope="global").fact
        page = self.client.get(f"/admin/facts/fact/{fact.pk}/change/")
        assert page.status_code == 200
        response = self.client.post(
            f"/admin/facts/fact/{fact.pk}/change/",
            {
                "value": '"Lyon"',
                "fact_type": "world_knowledge",
                "confidence": "0.9",
                "evidence": "",
                "supersedes-TOTAL_FORMS": "0",
                "supersedes-INITIAL_FORMS": "0",
            },
        )
        assert response.status_code == 302, (
            response.context["adminform"].form.errors,
            [f.formset.non_form_errors() for f in response.context["inline_admin_formsets"]],
        )
        versions = [(f.value, f.valid_to is None) for f in Fact.objects.order_by("valid_from")]
        assert versions == [("Paris", False), ("Lyon", True)]
        assert AuditEvent.objects.filter(actor="admin:root", entity_type="fact").exists()

    def test_delete_action_goes_through_the_batch_delete_service(self):
        facts = [
            fact_remember(workspace=self.workspace, key=f"k{n}", value=n, scope="global").fact
            for n in range(2)
        ]
        other = fact_remember(workspace=self.other_workspace, key="x", value=1, scope="global").fact
        response = self.client.post(
            "/admin/facts/fact/",
            {
                "action": "delete_selected",
                "_selected_action": [str(f.pk) for f in [*facts, other]],
                "post": "yes",
            },
        )
        assert response.status_code == 302
        assert not Fact.objects.exists()
        assert AuditEvent.objects.filter(action="delete", entity_type="fact", actor="admin:root").count() == 3

"""Forms of the browser: they parse input; the services decide."""

import json
import uuid

from django import forms

from core.models import Membership

ROLE_CHOICES = Membership.Role.choices
IDS_REQUIRED = "Select at least one row."
# One page holds at most 200 rows; a batch larger than that did not come from this UI.
MAX_BATCH = 500


class BatchDeleteForm(forms.Form):
    """The ids ticked on a page. `confirmed` is set by the no-JavaScript confirmation page."""

    confirmed = forms.BooleanField(required=False)

    def clean(self):
        cleaned = super().clean()
        ids = []
        for value in self.data.getlist("ids"):
            try:
                ids.append(uuid.UUID(str(value)))
            except ValueError:
                raise forms.ValidationError(f"'{value}' is not a valid id.")
        if not ids:
            raise forms.ValidationError(IDS_REQUIRED)
        if len(ids) > MAX_BATCH:
            raise forms.ValidationError(f"At most {MAX_BATCH} rows at a time.")
        cleaned["ids"] = list(dict.fromkeys(ids))
        return cleaned


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial=Membership.Role.VIEWER)
    password = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Only for a new operator account; leave blank to add an existing one.",
        min_length=10,
    )
    email = forms.EmailField(required=False)


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES)


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100, required=False)
    agent = forms.ModelChoiceField(
        queryset=None, required=False, empty_label="Any agent (workspace-wide)", to_field_name="slug"
    )
    read_only = forms.BooleanField(required=False, label="Read-only")
    expires_in_days = forms.IntegerField(
        required=False, min_value=1, max_value=3650, label="Expires in (days)"
    )

    def __init__(self, *args, agents, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].queryset = agents


VALUE_NOT_JSON = "This is not valid JSON. Untick “Value is JSON” to store it as text."


class JSONTextField(forms.CharField):
    """A JSON document typed in a textarea; empty means 'no change' (None)."""

    widget = forms.Textarea(attrs={"rows": 4, "spellcheck": "false"})

    def to_python(self, value):
        value = super().to_python(value)
        if value in ("", None):
            return None
        try:
            return json.loads(value)
        except ValueError:
            raise forms.ValidationError("This is not valid JSON.")

    def prepare_value(self, value):
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


def json_initial(value) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


class FactEditForm(forms.Form):
    value = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}))
    value_is_json = forms.BooleanField(required=False, label="Value is JSON")
    fact_type = forms.ChoiceField(label="Type")
    confidence = forms.FloatField(min_value=0, max_value=1, widget=forms.NumberInput(attrs={"step": "0.05"}))
    evidence = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args, **kwargs):
        from facts.models import Fact

        super().__init__(*args, **kwargs)
        self.fields["fact_type"].choices = Fact.FactType.choices

    @staticmethod
    def initial_for(fact):
        is_text = isinstance(fact.value, str)
        return {
            "value": fact.value if is_text else json_initial(fact.value),
            "value_is_json": not is_text,
            "fact_type": fact.fact_type,
            "confidence": fact.confidence,
            "evidence": fact.evidence,
        }

    def clean(self):
        cleaned = super().clean()
        if "value" in cleaned and cleaned.get("value_is_json"):
            try:
                cleaned["value"] = json.loads(cleaned["value"])
            except ValueError:
                self.add_error("value", VALUE_NOT_JSON)
        return cleaned

    def update(self, principal, fact):
        """A changed value opens a new version (fact_update returns it); the rest edits in place."""
        from facts.services import fact_update

        data = self.cleaned_data
        return fact_update(
            fact=fact,
            actor=principal.actor,
            value=data["value"],
            fact_type=data["fact_type"],
            confidence=data["confidence"],
            evidence=data["evidence"],
        )

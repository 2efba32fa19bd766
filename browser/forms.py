"""Forms of the browser: they parse input; the services decide."""

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

"""Forms of the browser: they parse input; the services decide."""

import json
import uuid

from django import forms

from core.models import Membership
from core.parsers import JSONRefused, json_loads_checked
from retention.models import Tier as RetentionTier
from webhooks.events import EVENT_TYPES
from webhooks.models import WebhookDelivery

ROLE_CHOICES = Membership.Role.choices
IDS_REQUIRED = "Select at least one row."
# One page holds at most 200 rows; a batch larger than that did not come from this UI.
MAX_BATCH = 500


def form_add_service_errors(form: forms.Form, exc) -> None:
    """Show a service's ApplicationError on `form`: under each field it names, or above all."""
    for field, errors in exc.fields.items():
        for error in errors:
            form.add_error(field if field in form.fields else None, error)
    if not exc.fields:
        form.add_error(None, exc.message)


BATCH_ID_INVALID = "'{value}' is not a valid id; nothing was deleted."


def _id_shown(value: str) -> str:
    """A refused id as the refusal quotes it: printable, and short (a header carries it to htmx)."""
    shown = "".join(ch if ch.isprintable() else "?" for ch in str(value)[:40])
    return shown + ("…" if len(str(value)) > 40 else "")


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
                raise forms.ValidationError(BATCH_ID_INVALID.format(value=_id_shown(value)))
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


def _json_error(not_json: str, exc: ValueError) -> str:
    """JSON the API's guard refuses (NUL, lone surrogate, depth, NaN) says why; the rest is not JSON."""
    return exc.message if isinstance(exc, JSONRefused) and exc.parsed else not_json


class JSONTextField(forms.CharField):
    """A JSON document typed in a textarea; empty means 'no change' (None)."""

    widget = forms.Textarea(attrs={"rows": 4, "spellcheck": "false"})

    def to_python(self, value):
        value = super().to_python(value)
        if value in ("", None):
            return None
        try:
            return json_loads_checked(value)
        except ValueError as exc:
            raise forms.ValidationError(_json_error("This is not valid JSON.", exc))

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
                cleaned["value"] = json_loads_checked(cleaned["value"])
            except ValueError as exc:
                self.add_error("value", _json_error(VALUE_NOT_JSON, exc))
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


class ProcedureEditForm(forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    procedure_type = forms.ChoiceField(label="Type")
    content = forms.CharField(widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}))
    content_is_json = forms.BooleanField(required=False, label="Content is JSON")
    trigger_conditions = JSONTextField(
        required=False,
        label="Trigger conditions (JSON)",
        help_text='For example {"goal_contains": ["refund"], "channel": "email"}.',
    )
    is_active = forms.BooleanField(required=False, label="Active")

    def __init__(self, *args, **kwargs):
        from procedures.models import Procedure

        super().__init__(*args, **kwargs)
        self.fields["procedure_type"].choices = Procedure.ProcedureType.choices

    @staticmethod
    def initial_for(procedure):
        is_text = isinstance(procedure.content, str)
        return {
            "name": procedure.name,
            "description": procedure.description,
            "procedure_type": procedure.procedure_type,
            "content": procedure.content if is_text else json_initial(procedure.content),
            "content_is_json": not is_text,
            "trigger_conditions": procedure.trigger_conditions,
            "is_active": procedure.is_active,
        }

    def clean(self):
        cleaned = super().clean()
        if "content" in cleaned and cleaned.get("content_is_json"):
            try:
                cleaned["content"] = json_loads_checked(cleaned["content"])
            except ValueError as exc:
                message = "This is not valid JSON. Untick “Content is JSON” to store text."
                self.add_error("content", _json_error(message, exc))
        return cleaned

    def update(self, principal, procedure):
        from procedures.services import procedure_update

        data = dict(self.cleaned_data)
        data.pop("content_is_json")
        data["trigger_conditions"] = data["trigger_conditions"] or {}
        return procedure_update(procedure=procedure, actor=principal.actor, **data)


class EpisodeFeedbackForm(forms.Form):
    rating = forms.TypedChoiceField(
        choices=[("", "No rating"), *[(str(n), f"{n} / 5") for n in range(1, 6)]],
        coerce=int,
        empty_value=None,
        required=False,
    )
    comment = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}), label="Comment")

    @staticmethod
    def initial_for(episode):
        return {"rating": episode.rating, "comment": episode.feedback_comment}

    def update(self, principal, episode):
        from episodes.services import episode_feedback

        return episode_feedback(
            episode=episode,
            rating=self.cleaned_data["rating"],
            comment=self.cleaned_data["comment"],
            actor=principal.actor,
        )


class EpisodeEditForm(forms.Form):
    """The curatable part of an episode's record; its timing stays as recorded. The outcome
    field exists only for a closed episode (an open one gets it when it closes)."""

    trigger_type = forms.CharField(max_length=50, required=False, label="Trigger")
    outcome = forms.ChoiceField(choices=[("success", "Success"), ("failure", "Failure")])
    error = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    input = JSONTextField(required=False, label="Input (JSON)", help_text="Empty: {}.")
    final_output = JSONTextField(required=False, label="Final output (JSON)", help_text="Empty: none (null).")

    def __init__(self, *args, episode, **kwargs):
        super().__init__(*args, **kwargs)
        if episode.ended_at is None:
            del self.fields["outcome"]

    @staticmethod
    def initial_for(episode):
        return {
            "trigger_type": episode.trigger_type,
            "outcome": episode.outcome,
            "error": episode.error,
            "input": episode.input,
            "final_output": episode.final_output,
        }

    def update(self, principal, episode):
        """Through episode_update, the service behind PATCH /api/v1/episodes/{id}/."""
        from episodes.services import episode_update

        data = dict(self.cleaned_data)
        if data["input"] is None:
            data["input"] = {}
        return episode_update(episode=episode, actor=principal.actor, **data)


class CheckpointMetadataForm(forms.Form):
    metadata = JSONTextField(
        required=False,
        label="Metadata (JSON object)",
        help_text="Empty: {}. The checkpoint's state itself is the client's and cannot be edited.",
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
    )

    @staticmethod
    def initial_for(checkpoint):
        return {"metadata": checkpoint.metadata}

    def clean_metadata(self):
        metadata = self.cleaned_data["metadata"]
        if metadata is None:
            return {}
        if not isinstance(metadata, dict):
            raise forms.ValidationError("Metadata must be a JSON object ({…}).")
        return metadata

    def update(self, principal, checkpoint):
        from checkpoints.services import checkpoint_metadata_update

        return checkpoint_metadata_update(
            checkpoint=checkpoint, metadata=self.cleaned_data["metadata"], actor=principal.actor
        )


class MemoryUserEditForm(forms.Form):
    display_name = forms.CharField(max_length=200, required=False, label="Display name")
    canonical_id = forms.CharField(max_length=255, label="Canonical id")

    @staticmethod
    def initial_for(memory_user):
        return {"display_name": memory_user.display_name, "canonical_id": memory_user.canonical_id}

    def update(self, principal, memory_user):
        from identities.services import memory_user_update

        return memory_user_update(memory_user=memory_user, actor=principal.actor, **self.cleaned_data)


class MemoryUserMergeForm(forms.Form):
    target = forms.CharField(
        max_length=255,
        label="Merge into",
        help_text="The canonical id (for example telegram:12345) or id of the user to keep.",
    )


class ThreadEditForm(forms.Form):
    title = forms.CharField(max_length=300, required=False)

    @staticmethod
    def initial_for(thread):
        return {"title": thread.title}

    def update(self, principal, thread):
        from threads.services import thread_update

        return thread_update(thread=thread, actor=principal.actor, title=self.cleaned_data["title"])


class EntryEditForm(forms.Form):
    content = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}))
    status = forms.ChoiceField()

    def __init__(self, *args, **kwargs):
        from episodic.models import EpisodicEntry

        super().__init__(*args, **kwargs)
        self.fields["status"].choices = EpisodicEntry.Status.choices

    @staticmethod
    def initial_for(entry):
        return {"content": entry.content, "status": entry.status}

    def update(self, principal, entry):
        """A new content is re-hashed and re-embedded by the service."""
        from episodic.services import entry_update

        return entry_update(entry=entry, actor=principal.actor, **self.cleaned_data)


class WebhookCreateForm(forms.Form):
    url = forms.URLField(max_length=2000, label="URL", assume_scheme="https")
    description = forms.CharField(max_length=200, required=False)
    events = forms.MultipleChoiceField(
        choices=[(name, name) for name in EVENT_TYPES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every event.",
    )


class DeliveryFilterForm(forms.Form):
    status = forms.ChoiceField(choices=[("", "Any status"), *WebhookDelivery.Status.choices], required=False)


class RetentionRuleForm(forms.Form):
    """One tier's rule, for the workspace (no agent) or one agent; blank limits are off."""

    tier = forms.ChoiceField(choices=RetentionTier.choices)
    agent = forms.ChoiceField(required=False, help_text="Blank: every agent without a rule of its own.")
    max_age_days = forms.IntegerField(
        min_value=1,
        max_value=36_500,
        required=False,
        label="Older than (days)",
        help_text="Delete rows older than this.",
    )
    keep_latest = forms.IntegerField(
        min_value=1,
        max_value=10_000_000,
        required=False,
        label="Keep the newest",
        help_text="Per thread (messages, snapshots), per thread and namespace (checkpoints), "
        "per person (the rest).",
    )

    def __init__(self, *args, agents=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "Workspace (every agent)")] + [(a.slug, a.slug) for a in agents]


class LegalHoldForm(forms.Form):
    person = forms.CharField(max_length=255, help_text="The person's id or canonical id, e.g. telegram:1001.")
    reason = forms.CharField(max_length=500)


class LegalHoldReleaseForm(forms.Form):
    """Which of the holds covering a person to release: the one placed on this record (the
    person, or a record merged into them); blank is the person's own."""

    placed_on = forms.UUIDField(required=False)


class SourceMessageForm(forms.Form):
    """Purge by source: the thread's message whose derived memory goes (blank: the whole thread)."""

    message = forms.UUIDField(required=False)

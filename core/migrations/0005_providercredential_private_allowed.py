"""ProviderCredential.private_allowed: a superuser's save lets the endpoint's requests reach a
private address (core.lib.addresses.provider_target). Existing endpoints start without it: a
save from before cannot say who made it, so a private one needs a superuser's save again."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_llm_job_defer"),
    ]

    operations = [
        migrations.AddField(
            model_name="providercredential",
            name="private_allowed",
            field=models.BooleanField(default=False, editable=False),
        ),
    ]

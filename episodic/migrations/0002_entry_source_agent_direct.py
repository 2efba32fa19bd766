"""A source label for entries stored directly (POST /api/v1/episodic-entries/): choices only,
no column or row changes."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('episodic', '0001_initial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='episodicentry',
            name='source',
            field=models.CharField(choices=[('user_assertion', 'User assertion'), ('user_accepted_assistant_proposal', 'User accepted assistant proposal'), ('verified_assistant_finding', 'Verified assistant finding'), ('agent_direct', 'Stored directly by the agent')], max_length=40),
        ),
    ]

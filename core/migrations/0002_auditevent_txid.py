"""The audit trail as an outbox: each event carries its transaction id (see AuditEvent.txid).

The column is added without a default first, so existing rows stay NULL without rewriting
the table, and the default applies to new rows only; the index is built concurrently, so
writes of the audit trail never wait on it (this migration is therefore not atomic).
"""

import django.db.models.functions.comparison
from django.db import migrations, models

from core.lib.migrations import AddIndexConcurrently

TXID = "((pg_current_xact_id())::text)::bigint"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("core", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="auditevent",
                    name="txid",
                    field=models.BigIntegerField(
                        blank=True,
                        db_default=django.db.models.functions.comparison.Cast(
                            django.db.models.functions.comparison.Cast(
                                models.Func(function="pg_current_xact_id"), models.TextField()
                            ),
                            models.BigIntegerField(),
                        ),
                        editable=False,
                        null=True,
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=[
                        'ALTER TABLE "core_auditevent" ADD COLUMN "txid" bigint NULL',
                        f'ALTER TABLE "core_auditevent" ALTER COLUMN "txid" SET DEFAULT {TXID}',
                    ],
                    reverse_sql='ALTER TABLE "core_auditevent" DROP COLUMN "txid"',
                ),
            ],
        ),
        AddIndexConcurrently(
            model_name="auditevent",
            index=models.Index(fields=["workspace", "txid", "id"], name="core_audit_outbox"),
        ),
    ]

"""Procedures' tsvector stored (as facts' is): every full-text match, order and word count read it
instead of parsing search_text, steps included, again for each row (docs/speed.md, "Procedures'
stored tsvector"). The column is computed for every existing row when it is added; no row changes."""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0004_llm_job_defer'),
        ('procedures', '0010_gin_indexes_without_pending_list'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='procedure',
            name='procedures_search_fts',
        ),
        migrations.AddField(
            model_name='procedure',
            name='search_vector',
            field=models.GeneratedField(db_persist=True, expression=django.contrib.postgres.search.SearchVector('search_text', config='english'), output_field=django.contrib.postgres.search.SearchVectorField()),
        ),
        migrations.AddIndex(
            model_name='procedure',
            index=django.contrib.postgres.indexes.GinIndex(fastupdate=False, fields=['search_vector'], name='procedures_search_fts'),
        ),
    ]

"""A stored, indexed tsvector for full-text search over episodes.

episode_search analysed trigger, input, output, error and feedback of every candidate per
query, so it could only rank the 5,000 most recent episodes in scope. PostgreSQL now keeps
the weighted vector (trigger A; input, output and error B; feedback C, as before) in a
generated column with a GIN index. It is a column, not a model field, so ordinary episode
reads never load it. Each text is cut to its first 100,000 characters, which keeps the
vector far below PostgreSQL's 1 MB limit whatever a run stored.
"""

from django.db import migrations

ADD = """
ALTER TABLE episodes_episode ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english'::regconfig, left(coalesce(trigger_type, ''), 100000)), 'A')
    || setweight(to_tsvector('english'::regconfig, left(coalesce(input::text, ''), 100000)), 'B')
    || setweight(to_tsvector('english'::regconfig, left(coalesce(final_output::text, ''), 100000)), 'B')
    || setweight(to_tsvector('english'::regconfig, left(coalesce(error, ''), 100000)), 'B')
    || setweight(to_tsvector('english'::regconfig, left(coalesce(feedback_comment, ''), 100000)), 'C')
) STORED;
CREATE INDEX episodes_episode_search ON episodes_episode USING gin (search_tsv);
"""

DROP = """
DROP INDEX episodes_episode_search;
ALTER TABLE episodes_episode DROP COLUMN search_tsv;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0003_episode_episodes_recent_and_more"),
    ]

    operations = [migrations.RunSQL(ADD, DROP)]

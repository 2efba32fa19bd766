"""An index of each entry's words under its person, for BM25's match.

The search's BM25 finds the person's entries holding a query term. Through the GIN index of
`search_vector` it reads the postings of those terms for every person of the table, and
intersects them with the person's rows: at 1,000,000 entries (200 people of 5,000) 10.8 ms
p50 to find 300 rows, nearly all of it in the GIN scan, growing with the table. Testing each
of the person's rows instead reads one heap page a row and costs the same (docs/speed.md).

`episodic_person_terms(memory_user_id, search_vector)` keys each of an entry's lexemes by its
person (`<person id>:<lexeme>`), and a GIN index of it holds one posting list per person and
word: the match reads only the person's own rows of the query's terms (1.4 ms at 1,000,000).
The function is immutable (a tsvector's lexemes and a UUID's text), so PostgreSQL can index
it; the search still tests `@@` on what it finds. Built concurrently: adds go on meanwhile.
"""

from django.db import migrations

from core.lib.migrations import InvalidIndexDrop

FUNCTION = """
CREATE OR REPLACE FUNCTION episodic_person_terms(memory_user uuid, terms tsvector) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT coalesce(array_agg(memory_user::text || ':' || lexeme), '{}') FROM unnest(terms) $$
"""
DROP_FUNCTION = "DROP FUNCTION IF EXISTS episodic_person_terms(uuid, tsvector)"
INDEX = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS episodes_entry_person_terms ON episodes_episodicentry "
    "USING gin (episodic_person_terms(memory_user_id, search_vector)) WITH (fastupdate = off)"
)
DROP_INDEX = "DROP INDEX CONCURRENTLY IF EXISTS episodes_entry_person_terms"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("episodic", "0010_entry_first_source_index"),
    ]

    operations = [
        migrations.RunSQL(FUNCTION, DROP_FUNCTION),
        # IF NOT EXISTS alone would keep an index an interrupted build left invalid.
        InvalidIndexDrop("episodes_entry_person_terms"),
        migrations.RunSQL(INDEX, DROP_INDEX),
    ]

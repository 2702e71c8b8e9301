"""The metadata change log, and on Postgres the commit-time stamping of its versions."""

import django.utils.timezone
from django.db import migrations, models

# The advisory lock 1297239365 ("MRME"), an arbitrary constant, orders stamping and
# nothing else.
STAMP_SQL = """
CREATE FUNCTION core_metadatachange_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Held until this transaction's commit is visible: versions grow in commit order.
    PERFORM pg_advisory_xact_lock(1297239365);
    -- The newest version plus one: gapless, so a reader can tell pruned from never.
    UPDATE core_metadatachange
       SET version = (SELECT coalesce(max(version), 0) + 1 FROM core_metadatachange)
     WHERE id = NEW.id;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER core_metadatachange_stamp
    AFTER INSERT ON core_metadatachange
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION core_metadatachange_stamp();
"""

UNSTAMP_SQL = """
DROP TRIGGER IF EXISTS core_metadatachange_stamp ON core_metadatachange;
DROP FUNCTION IF EXISTS core_metadatachange_stamp();
"""


def stamp_at_commit(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(STAMP_SQL)


def stop_stamping(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNSTAMP_SQL)


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="MetadataChange",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("version", models.BigIntegerField(blank=True, null=True, unique=True)),
                ("kind", models.CharField(max_length=64)),
                (
                    "scope",
                    models.CharField(
                        choices=[
                            ("topic", "A topic and its partitions"),
                            ("acls", "A tenant's ACLs"),
                            ("keys", "A tenant's API keys"),
                            ("tenant", "A tenant's settings"),
                            ("brokers", "The broker list"),
                            ("all", "Anything (brokers re-read everything)"),
                        ],
                        max_length=16,
                    ),
                ),
                ("tenant_id", models.BigIntegerField(blank=True, null=True)),
                ("topic_id", models.UUIDField(blank=True, null=True)),
                (
                    "created_at",
                    models.DateTimeField(db_index=True, default=django.utils.timezone.now),
                ),
            ],
            options={
                "ordering": ["version"],
            },
        ),
        migrations.RunPython(stamp_at_commit, stop_stamping),
    ]

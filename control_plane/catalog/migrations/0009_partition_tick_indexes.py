"""Indexes for the controller's tick: it reads only the partitions an election or a
reassignment could change, without scanning every partition (controller/services.py)."""

from django.db import migrations, models

# Postgres only: JSON containment (``isr @> '[3]'``) has no portable index. SQLite (the
# embedded default) scans instead.
ISR_INDEX_SQL = "CREATE INDEX partition_isr_gin ON catalog_partition USING gin (isr jsonb_path_ops)"
DROP_ISR_INDEX_SQL = "DROP INDEX IF EXISTS partition_isr_gin"


def index_isr(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(ISR_INDEX_SQL)


def drop_isr_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_ISR_INDEX_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0008_topic_sample_rates"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="partition",
            index=models.Index(fields=["leader"], name="partition_leader"),
        ),
        migrations.AddIndex(
            model_name="partition",
            index=models.Index(
                condition=models.Q(
                    ("adding_replicas", []), ("removing_replicas", []), _negated=True
                ),
                fields=["id"],
                name="partition_reassigning",
            ),
        ),
        migrations.RunPython(index_isr, drop_isr_index),
    ]

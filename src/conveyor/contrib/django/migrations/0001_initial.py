"""Create Conveyor's schema (Conveyor's own migrations, run through its app API) in
the databases of the ConveyorBackends that follow the database being migrated."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def forwards(apps: Any, schema_editor: Any) -> None:
    from conveyor.contrib.django.apps import migrate_conveyor

    migrate_conveyor(using=schema_editor.connection.alias)


class Migration(migrations.Migration):
    # Conveyor migrates on its own connections, outside Django's transaction.
    atomic = False
    initial = True
    dependencies = []
    operations = [
        # Conveyor has no downgrade: unapplying leaves its tables in place.
        migrations.RunPython(forwards, migrations.RunPython.noop, elidable=False),
    ]

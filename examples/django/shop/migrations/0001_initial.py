from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("email", models.EmailField(max_length=254)),
                ("total_cents", models.IntegerField()),
                ("receipt_sent", models.BooleanField(default=False)),
            ],
        ),
    ]

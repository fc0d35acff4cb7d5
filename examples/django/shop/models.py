from __future__ import annotations

from django.db import models


class Order(models.Model):
    email: models.EmailField[str, str] = models.EmailField()
    total_cents: models.IntegerField[int, int] = models.IntegerField()
    receipt_sent: models.BooleanField[bool, bool] = models.BooleanField(default=False)

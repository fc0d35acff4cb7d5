from django.db import models


class Order(models.Model):
    email = models.EmailField()
    total_cents = models.IntegerField()
    receipt_sent = models.BooleanField(default=False)

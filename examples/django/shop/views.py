import json

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.tasks import default_task_backend
from django.tasks.exceptions import TaskResultDoesNotExist
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from .models import Order
from .tasks import send_receipt


@csrf_exempt  # an API endpoint for the example; a real one would authenticate
@require_POST
def create_order(request: HttpRequest) -> HttpResponse:
    """Create an order and enqueue its receipt in one transaction: ``"fail": true``
    raises after the enqueue, and the rollback takes the order and the job with it."""
    data = json.loads(request.body or b"{}")
    with transaction.atomic():
        order = Order.objects.create(email=data["email"], total_cents=int(data["total_cents"]))
        result = send_receipt.enqueue(order.pk)
        if data.get("fail"):
            raise RuntimeError("failing on purpose after the enqueue")
    return JsonResponse({"order": order.pk, "task_result": result.id}, status=201)


@require_GET
def result(request: HttpRequest, result_id: str) -> HttpResponse:
    try:
        found = default_task_backend.get_result(result_id)
    except TaskResultDoesNotExist:
        return JsonResponse({"error": "no such task result"}, status=404)
    body = {"id": found.id, "task": found.task.module_path, "status": found.status,
            "attempts": found.attempts,
            "errors": [e.exception_class_path for e in found.errors]}
    if found.status == "SUCCESSFUL":
        body["return_value"] = found.return_value
    return JsonResponse(body)

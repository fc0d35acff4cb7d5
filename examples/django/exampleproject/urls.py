from django.contrib import admin
from django.urls import include, path
from shop import views

from conveyor.contrib.django.dashboard import dashboard_urls

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/", views.create_order),
    path("results/<str:result_id>/", views.result),
    # The dashboard, for active staff (log in at /admin/ first).
    path("ops/jobs/", include(dashboard_urls())),
]

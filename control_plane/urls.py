"""Root URLs: console, admin API, API schema and docs, Django admin, health, metrics."""

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from control_plane import metrics
from control_plane.core import views as core_views

urlpatterns = [
    path("api/v1/", include("control_plane.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("admin/", admin.site.urls),
    re_path(r"^api/", core_views.api_not_found),
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    # Browsers ask for it on pages without the console's <link rel="icon"> (API docs, admin).
    path("favicon.ico", core_views.favicon),
    path("", include("frontend.urls")),
]

handler404 = "control_plane.core.views.not_found"
handler500 = "control_plane.core.views.server_error"

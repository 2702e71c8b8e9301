"""Kafka Connect's REST paths under ``tenants/{t}/connect/`` (trailing slash optional)."""

from django.urls import re_path

from control_plane.connect import views

TENANT = r"tenants/(?P<tenant_slug>[a-z0-9-]+)/connect"
NAME = r"(?P<name>[^/]+)"
TASK = r"(?P<task>[0-9]{1,6})"

ROUTES = [
    (r"connectors", views.ConnectorsView, "connect-connectors"),
    (rf"connectors/{NAME}", views.ConnectorView, "connect-connector"),
    (rf"connectors/{NAME}/config", views.ConnectorConfigView, "connect-connector-config"),
    (rf"connectors/{NAME}/status", views.ConnectorStatusView, "connect-connector-status"),
    (rf"connectors/{NAME}/restart", views.ConnectorRestartView, "connect-connector-restart"),
    (rf"connectors/{NAME}/(?P<action>pause|resume|stop)", views.ConnectorStateView,
     "connect-connector-state"),
    (rf"connectors/{NAME}/offsets", views.OffsetsView, "connect-connector-offsets"),
    (rf"connectors/{NAME}/topics", views.TopicsView, "connect-connector-topics"),
    (rf"connectors/{NAME}/topics/reset", views.TopicsResetView, "connect-connector-topics-reset"),
    (rf"connectors/{NAME}/tasks", views.TasksView, "connect-tasks"),
    (rf"connectors/{NAME}/tasks/{TASK}/status", views.TaskStatusView, "connect-task-status"),
    (rf"connectors/{NAME}/tasks/{TASK}/restart", views.TaskRestartView, "connect-task-restart"),
    (r"connector-plugins", views.PluginsView, "connect-plugins"),
    (r"connector-plugins/(?P<plugin>[^/]+)/config/validate", views.ValidateView,
     "connect-plugin-validate"),
]  # fmt: skip

urlpatterns = [
    re_path(rf"^{TENANT}/{route}/?$", view.as_view(), name=name) for route, view, name in ROUTES
]

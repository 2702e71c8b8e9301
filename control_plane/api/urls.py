"""Routes of the admin API under /api/v1/."""

from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from control_plane.api import cluster, views
from control_plane.connect import urls as connect_urls
from control_plane.streams import views as data

TENANT = r"tenants/(?P<tenant_slug>[a-z0-9-]+)"

router = SimpleRouter()
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("plans", views.PlanViewSet, basename="plan")
router.register("tenant-deletions", views.TenantDeletionViewSet, basename="tenant-deletion")
router.register(f"{TENANT}/members", views.MembershipViewSet, basename="member")
router.register(f"{TENANT}/invitations", views.InvitationViewSet, basename="invitation")
router.register(f"{TENANT}/topics", views.TopicViewSet, basename="topic")
router.register(
    f"{TENANT}/service-accounts", views.ServiceAccountViewSet, basename="service-account"
)
router.register(f"{TENANT}/api-keys", views.ApiKeyViewSet, basename="api-key")
router.register(f"{TENANT}/acls", views.AclViewSet, basename="acl")
router.register(f"{TENANT}/consumer-groups", views.ConsumerGroupViewSet, basename="consumer-group")
router.register(f"{TENANT}/audit-events", views.AuditEventViewSet, basename="audit-event")
router.register(f"{TENANT}/client-quotas", views.ClientQuotaViewSet, basename="client-quota")
router.register(f"{TENANT}/client-versions", views.ClientVersionViewSet, basename="client-version")
router.register(f"{TENANT}/usage", views.UsageViewSet, basename="usage")
router.register(f"{TENANT}/alert-rules", views.AlertRuleViewSet, basename="alert-rule")
router.register("brokers", cluster.BrokerViewSet, basename="broker")
router.register("cluster/partitions", cluster.ClusterPartitionViewSet, basename="cluster-partition")
router.register(
    "cluster/reassignments", cluster.ReassignmentViewSet, basename="cluster-reassignment"
)

app_name = "api"
urlpatterns = [
    path("auth/login/", views.LoginView.as_view(), name="login"),
    path("auth/logout/", views.LogoutView.as_view(), name="logout"),
    path("auth/me/", views.MeView.as_view(), name="me"),
    path("invitations/accept/", views.InvitationAcceptView.as_view(), name="invitation-accept"),
    path("auth/tokens/", views.PersonalTokensView.as_view(), name="personal-tokens"),
    path("auth/tokens/<str:token_id>/", views.PersonalTokenView.as_view(), name="personal-token"),
    path("cluster/rebalance/", cluster.RebalanceView.as_view(), name="cluster-rebalance"),
    path("usage/", views.ClusterUsageView.as_view(), name="cluster-usage"),
    # The data API (control_plane.streams): records over HTTP.
    re_path(
        rf"^{TENANT}/topics/(?P<topic_name>[^/]+)/records/$",
        data.ProduceView.as_view(),
        name="topic-records",
    ),
    re_path(
        rf"^{TENANT}/topics/(?P<topic_name>[^/]+)/partitions/(?P<partition>[0-9]{{1,9}})/records/$",
        data.PartitionRecordsView.as_view(),
        name="partition-records",
    ),
    re_path(rf"^{TENANT}/consumers/$", data.ConsumersView.as_view(), name="consumers"),
    re_path(
        rf"^{TENANT}/consumers/(?P<instance_id>[0-9a-f]{{32}})/$",
        data.ConsumerView.as_view(),
        name="consumer",
    ),
    re_path(
        rf"^{TENANT}/consumers/(?P<instance_id>[0-9a-f]{{32}})/records/$",
        data.ConsumerRecordsView.as_view(),
        name="consumer-records",
    ),
    re_path(
        rf"^{TENANT}/consumers/(?P<instance_id>[0-9a-f]{{32}})/commit/$",
        data.ConsumerCommitView.as_view(),
        name="consumer-commit",
    ),
    # Kafka Connect's REST API (control_plane.connect).
    *connect_urls.urlpatterns,
    *router.urls,
]

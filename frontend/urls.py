from django.contrib.auth import views as auth_views
from django.urls import path

from frontend import (
    access,
    audit,
    browse,
    clients,
    cluster,
    connect,
    export,
    groups,
    members,
    overview,
    topics,
    views,
)

app_name = "frontend"
T = "t/<slug:tenant_slug>/"
TOPIC = T + "topics/<str:name>/"
CONNECTOR = T + "connect/<str:name>/"
urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("cluster/", cluster.cluster, name="cluster"),
    path("cluster/brokers/<int:broker_id>/", cluster.broker_action, name="broker-action"),
    path("cluster/rebalance/", cluster.rebalance, name="cluster-rebalance"),
    path("cluster/reassign/", cluster.reassign_partition, name="cluster-reassign"),
    path(T, overview.overview, name="overview"),
    path(T + "topics/", topics.topic_list, name="topics"),
    path(T + "create-topic/", topics.topic_create, name="topic-create"),
    path(TOPIC, topics.topic_detail, name="topic"),
    path(TOPIC + "configs/", topics.topic_configs, name="topic-configs"),
    path(TOPIC + "partitions/", topics.topic_add_partitions, name="topic-partitions"),
    path(TOPIC + "delete/", topics.topic_delete, name="topic-delete"),
    path(TOPIC + "messages/", browse.topic_messages, name="topic-messages"),
    path(TOPIC + "messages/export/", export.topic_messages_export, name="topic-messages-export"),
    path(TOPIC + "produce/", browse.topic_produce, name="topic-produce"),
    path(T + "groups/", groups.group_list, name="groups"),
    path(T + "groups/<str:group_id>/", groups.group_detail, name="group"),
    path(T + "groups/<str:group_id>/reset/", groups.group_reset, name="group-reset"),
    path(T + "groups/<str:group_id>/delete/", groups.group_delete, name="group-delete"),
    path(T + "connect/", connect.connector_list, name="connectors"),
    path(T + "create-connector/", connect.connector_create, name="connector-create"),
    path(CONNECTOR, connect.connector_detail, name="connector"),
    path(CONNECTOR + "state/", connect.connector_state, name="connector-state"),
    path(CONNECTOR + "restart/", connect.connector_restart, name="connector-restart"),
    path(CONNECTOR + "tasks/<int:task>/restart/", connect.task_restart, name="task-restart"),
    path(
        CONNECTOR + "topics/reset/", connect.connector_topics_reset, name="connector-topics-reset"
    ),
    path(CONNECTOR + "delete/", connect.connector_delete, name="connector-delete"),
    path(T + "members/", members.member_list, name="members"),
    path(T + "members/add/", members.member_add, name="member-add"),
    path(T + "members/<int:pk>/role/", members.member_role, name="member-role"),
    path(T + "members/<int:pk>/remove/", members.member_remove, name="member-remove"),
    path(T + "audit/", audit.audit_log, name="audit"),
    path(T + "clients/", clients.client_list, name="clients"),
    path(T + "service-accounts/", access.service_account_list, name="service-accounts"),
    path(
        T + "create-service-account/",
        access.service_account_create,
        name="service-account-create",
    ),
    path(
        T + "service-accounts/<str:name>/delete/",
        access.service_account_delete,
        name="service-account-delete",
    ),
    path(T + "api-keys/", access.api_key_list, name="api-keys"),
    path(T + "create-api-key/", access.api_key_create, name="api-key-create"),
    path(T + "api-keys/<str:key_id>/revoke/", access.api_key_revoke, name="api-key-revoke"),
    path(T + "acls/", access.acl_list, name="acls"),
    path(T + "create-acl/", access.acl_create, name="acl-create"),
    path(T + "acls/<int:pk>/delete/", access.acl_delete, name="acl-delete"),
    path(T + "acl-check/", access.acl_check, name="acl-check"),
]

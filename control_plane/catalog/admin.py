from django.contrib import admin

from control_plane.catalog.models import Broker, Topic
from control_plane.core.admin_mixins import ReadOnlyAdmin


@admin.register(Topic)
class TopicAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ["name", "tenant", "partition_count", "replication_factor", "topic_id"]
    list_filter = ["tenant"]
    search_fields = ["name"]


@admin.register(Broker)
class BrokerAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ["id", "host", "port", "rack", "state", "last_heartbeat"]

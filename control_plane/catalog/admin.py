from django.contrib import admin

from control_plane.catalog.models import Broker, Topic


@admin.register(Topic)
class TopicAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "partition_count", "replication_factor", "topic_id"]
    list_filter = ["tenant"]
    search_fields = ["name"]
    readonly_fields = ["topic_id", "collision_key", "partition_count", "replication_factor"]

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False  # topics are created through services (validation, limits, audit)


@admin.register(Broker)
class BrokerAdmin(admin.ModelAdmin):
    list_display = ["id", "host", "port", "rack", "state", "last_heartbeat"]

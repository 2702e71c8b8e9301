from django.contrib import admin

from control_plane.audit.models import AuditEvent
from control_plane.core.admin_mixins import ReadOnlyAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ["created_at", "tenant_slug", "actor", "action", "object_repr", "source_ip"]
    list_filter = ["action", "actor_type"]
    search_fields = ["actor", "object_repr", "tenant_slug"]

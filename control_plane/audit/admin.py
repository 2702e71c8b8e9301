from django.contrib import admin

from control_plane.audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "tenant_slug", "actor", "action", "object_repr", "source_ip"]
    list_filter = ["action", "actor_type"]
    search_fields = ["actor", "object_repr", "tenant_slug"]

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

from django.contrib import admin

from control_plane.access.models import ApiKey, ServiceAccount


@admin.register(ServiceAccount)
class ServiceAccountAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "created_at"]
    list_filter = ["tenant"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = [
        "key_id",
        "service_account",
        "tenant",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["tenant"]
    # Only metadata: the stored credentials are not shown, and keys are made by services.
    fields = [
        "key_id",
        "service_account",
        "description",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    readonly_fields = fields

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False

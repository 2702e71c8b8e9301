from django.contrib import admin

from control_plane.access.models import Acl, ApiKey, ServiceAccount
from control_plane.core.admin_mixins import ReadOnlyAdmin


@admin.register(ServiceAccount)
class ServiceAccountAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ["name", "tenant", "created_at"]
    list_filter = ["tenant"]


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = [
        "key_id",
        "service_account",
        "tenant",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["tenant"]
    # Metadata only: the stored credentials are not shown.
    fields = [
        "key_id",
        "service_account",
        "description",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]


@admin.register(Acl)
class AclAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = [
        "tenant",
        "service_account",
        "permission",
        "operation",
        "resource_type",
        "pattern_type",
        "resource_name",
        "host",
    ]
    list_filter = ["tenant", "resource_type", "permission"]

from django.contrib import admin

from control_plane.core.admin_mixins import ReadOnlyAdmin
from control_plane.tenancy.models import Membership, Tenant


class MembershipInline(ReadOnlyAdmin, admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Tenant)
class TenantAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ["slug", "name", "max_partitions", "max_storage_bytes", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

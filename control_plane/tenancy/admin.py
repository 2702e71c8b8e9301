from django.contrib import admin

from control_plane.tenancy.models import Membership, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "max_partitions", "max_storage_bytes", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

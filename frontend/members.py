"""Members & roles: the tenant's people, add by username or email, change a role, remove.

Every change goes through ``control_plane.tenancy.services`` as the REST API does, so the
rules (admins manage members up to admin, only owners touch owners, a tenant keeps at
least one owner) and their messages are the services' own; the page only hides controls
the signed-in role cannot use.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from control_plane.access import policy
from control_plane.accounts import services as accounts
from control_plane.accounts.models import Invitation
from control_plane.core.errors import InvalidInput, ServiceError
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Membership, Role
from frontend.console import Page, base_url, form_errors, member_view

NEEDS = policy.MEMBERSHIP_NEEDS


def _membership(page: Page, pk: int) -> Membership:
    return page.owned(Membership.objects.select_related("user"), "member", pk=pk)


def _grantable(page: Page) -> list[tuple[str, str]]:
    """Roles the signed-in member may grant: up to their own (only owners grant owner)."""
    return [(value, label) for value, label in Role.choices if Role.at_least(page.role, value)]


def _may_manage(page: Page, membership: Membership) -> bool:
    return page.may(NEEDS["partial_update"]) and Role.at_least(page.role, membership.role)


def find_user(identifier: str) -> AbstractBaseUser:
    """The user with this username or, failing that, the one account with this email."""
    if not identifier:
        raise InvalidInput("enter a username or email", field="username")
    try:
        return tenancy_services.find_user(identifier)
    except InvalidInput:
        if "@" not in identifier:
            raise
    # Emails are not unique in Django's user model: only an unambiguous, proven one names
    # a user (anyone can sign up with an address; only its owner can confirm it).
    matches = accounts.users_with_email(identifier)[:2]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise InvalidInput(
            "more than one user has this email; enter the username", field="username"
        )
    raise InvalidInput(f"no user with the username or email {identifier!r}", field="username")


def _render(
    page: Page,
    form: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    invite: dict[str, str] | None = None,
    invite_errors: dict[str, str] | None = None,
) -> HttpResponse:
    memberships = Membership.objects.filter(tenant=page.tenant).select_related("user")
    may_add = page.may(NEEDS["create"])
    invitations = (
        [i for i in Invitation.objects.filter(tenant=page.tenant)[:50] if i.status == "pending"]
        if may_add
        else []
    )
    rows = [
        {"membership": m, "manageable": _may_manage(page, m), "is_you": m.user == page.request.user}
        for m in memberships.order_by("user__username")
    ]
    return page.render(
        "frontend/members.html",
        {
            "members": rows,
            "roles": _grantable(page),
            "may_add": may_add,
            "form": form or {"username": "", "role": Role.VIEWER},
            "errors": errors or {},
            "invitations": invitations,
            "heirs": [row["membership"] for row in rows if not row["is_you"]]
            if page.role == Role.OWNER
            else [],
            "invite": invite or {"email": "", "role": Role.DEVELOPER},
            "invite_errors": invite_errors or {},
        },
        status=400 if errors or invite_errors else 200,
    )


def _back(page: Page) -> HttpResponse:
    return redirect("frontend:members", tenant_slug=page.tenant.slug)


@member_view("members", role=NEEDS["list"].role)
def member_list(page: Page) -> HttpResponse:
    return _render(page)


@require_POST
@member_view("members", role=NEEDS["create"].role)
def member_add(page: Page) -> HttpResponse:
    form = {k: page.request.POST.get(k, "").strip() for k in ("username", "role")}
    if page.request.user.is_staff:  # operators see every account anyway: precise answers
        try:
            user = find_user(form["username"])
            tenancy_services.add_member(page.actor, page.tenant, user=user, role=form["role"])
        except ServiceError as exc:
            return _render(page, form, form_errors(exc))
        messages.success(
            page.request, f"{user.get_username()} added as {Role(form['role']).label.lower()}."
        )
        return _back(page)
    # A tenant admin gets one answer whether or not the account exists (no enumeration).
    if not form["username"]:
        return _render(page, form, {"username": "enter a username or email"})
    try:
        found: AbstractBaseUser | None = find_user(form["username"])
    except InvalidInput:
        found = None
    if found is not None and not accounts.is_verified(found):
        found = None  # an address nobody proved is no one's yet
    try:
        tenancy_services.add_member_quietly(page.actor, page.tenant, user=found, role=form["role"])
    except ServiceError as exc:  # the role, or the caller's right to grant it
        return _render(page, form, form_errors(exc))
    messages.success(page.request, tenancy_services.NEUTRAL_ADD_MESSAGE)
    return _back(page)


@require_POST
@member_view("members", role=NEEDS["partial_update"].role)
def member_role(page: Page, pk: int) -> HttpResponse:
    membership = _membership(page, pk)
    role = page.request.POST.get("role", "").strip()
    name = membership.user.get_username()
    if role == membership.role:
        messages.info(page.request, f"{name} is already {membership.get_role_display().lower()}.")
    else:
        page.act(
            lambda: tenancy_services.change_member_role(page.actor, membership, role=role),
            f"{name} is now {role}.",
        )
    return _back(page)


@require_http_methods(["GET", "HEAD", "POST"])
@member_view("members", role=NEEDS["destroy"].role)
def member_remove(page: Page, pk: int) -> HttpResponse:
    """GET asks for confirmation (a page of its own, so it works without script); POST removes."""
    membership = _membership(page, pk)
    if page.request.method != "POST":
        return page.render(
            "frontend/member_remove.html",
            {"membership": membership, "is_you": membership.user == page.request.user},
        )
    name = membership.user.get_username()
    removed = page.act(
        lambda: tenancy_services.remove_member(page.actor, membership),
        f"{name} removed from {page.tenant.name}.",
    )
    if removed and membership.user == page.request.user:
        return redirect("frontend:home")  # no longer a member: this tenant is gone for them
    return _back(page)


@require_POST
@member_view("members", role=NEEDS["create"].role)
def invitation_create(page: Page) -> HttpResponse:
    invite = {k: page.request.POST.get(k, "").strip() for k in ("email", "role")}
    try:
        accounts.invite(
            page.actor,
            page.tenant,
            email=invite["email"],
            role=invite["role"],
            base_url=base_url(page.request),
        )
    except ServiceError as exc:
        return _render(page, invite=invite, invite_errors=form_errors(exc))
    messages.success(page.request, f"Invitation sent to {invite['email'].lower()}.")
    return _back(page)


@require_POST
@member_view("members", role=NEEDS["create"].role)
def invitation_revoke(page: Page, pk: int) -> HttpResponse:
    invitation = page.owned(Invitation.objects.all(), "invitation", pk=pk)
    page.act(
        lambda: accounts.revoke_invitation(page.actor, invitation),
        f"The invitation to {invitation.email} was withdrawn.",
    )
    return _back(page)


@require_POST
@member_view("members", role=Role.OWNER)
def transfer_ownership(page: Page) -> HttpResponse:
    pk = page.request.POST.get("member", "")
    membership = _membership(page, int(pk)) if pk.isdigit() else None
    if membership is None:
        messages.error(page.request, "Choose the member who becomes the owner.")
        return _back(page)
    page.act(
        lambda: tenancy_services.transfer_ownership(page.actor, page.tenant, to=membership),
        f"{membership.user.get_username()} owns {page.tenant.name} now; you are an admin.",
    )
    return _back(page)


@require_POST
@member_view("members")
def leave(page: Page) -> HttpResponse:
    left = page.act(
        lambda: tenancy_services.leave(page.actor, page.tenant),
        f"You left {page.tenant.name}.",
    )
    return redirect("frontend:home") if left else _back(page)

"""Millrace control plane: the Django project (settings, URLs, ASGI, Celery app)."""

from control_plane.celery import app as celery_app

__all__ = ["celery_app"]

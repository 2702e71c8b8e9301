"""The end of a tenant's life: deletion, run by a Celery job that survives restarts."""

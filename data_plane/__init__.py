"""Millrace data plane: plain-Python logic shared by the broker and the control plane.

Modules here import no Django, Celery or Channels (a test enforces it). The control
plane adapts its models to these types; the broker (Step 3) reaches metadata through a
narrow port and uses the same rules.
"""

"""Millrace Connect: the worker runtime, connectors, converters and transforms (Step 14).

No Django here: the control plane's REST API and console (``control_plane.connect``) and
``manage.py connect`` drive it through :mod:`data_plane.connect.runtime`.
"""

from django.apps import AppConfig


class ControllerConfig(AppConfig):
    name = "control_plane.controller"
    label = "controller"
    verbose_name = "Controller"

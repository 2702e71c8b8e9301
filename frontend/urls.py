from django.contrib.auth import views as auth_views
from django.urls import path

from frontend import topics, views

app_name = "frontend"
T = "t/<slug:tenant_slug>/"
TOPIC = T + "topics/<str:name>/"
urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(T + "topics/", topics.topic_list, name="topics"),
    path(T + "create-topic/", topics.topic_create, name="topic-create"),
    path(TOPIC, topics.topic_detail, name="topic"),
    path(TOPIC + "configs/", topics.topic_configs, name="topic-configs"),
    path(TOPIC + "partitions/", topics.topic_add_partitions, name="topic-partitions"),
    path(TOPIC + "delete/", topics.topic_delete, name="topic-delete"),
]

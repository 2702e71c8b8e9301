from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """``?limit=&offset=``; 100 by default, 1000 at most."""

    default_limit = 100
    max_limit = 1000

import re

from django.core.exceptions import ImproperlyConfigured
from rest_framework import pagination
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

PAGINATION_CLASS_REQUIRED = "{view} pages a list: declare `pagination_class = LimitOffsetPagination` on it."
LIMIT_INVALID = "A whole number of at least 1 (at most {max_limit} are served)."
OFFSET_INVALID = "A whole number of at least 0."
_DIGITS = re.compile(r"[0-9]+")


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """`?limit=&offset=`; the body carries the total so clients can page without guessing."""

    default_limit = 50
    max_limit = 500

    def get_limit(self, request):
        """`limit` as asked, capped at `max_limit`; absent or empty, the default.

        DRF serves the default for a value that is not a count (`abc`, `-1`, `0`, `2.0`), so a
        client's mistake looked like an answer to what it asked: here it is a 400 naming the
        parameter.
        """
        limit = self._count_param(request, self.limit_query_param, minimum=1)
        if limit is None:
            return self.default_limit
        return min(limit, self.max_limit)

    def get_offset(self, request):
        offset = self._count_param(request, self.offset_query_param, minimum=0)
        return 0 if offset is None else offset

    def _count_param(self, request, name: str, *, minimum: int) -> int | None:
        raw = request.query_params.get(name, "").strip()
        if not raw:
            return None
        # Past 20 digits no table is reached, and int() of thousands of digits would refuse.
        value = (int(raw) if len(raw) <= 20 else 10**20) if _DIGITS.fullmatch(raw) else -1
        if value < minimum:
            message = LIMIT_INVALID.format(max_limit=self.max_limit) if minimum else OFFSET_INVALID
            raise ValidationError({name: [message]})
        return value

    def paginate_queryset(self, queryset, request, view=None):
        """The first page is read before the total, which is counted only when the page
        cannot tell it.

        A first page shorter than `limit` is the whole list, so its rows are the total: most
        lists a client reads fit in one page, and they no longer pay a COUNT of the same rows.
        A full first page counts. A later page counts first, as DRF does, and is read only if
        the list reaches its offset (an offset past any table, 2**63, is never sent to the
        database).
        """
        self.request = request
        self.limit = self.get_limit(request)
        if self.limit is None:
            return None
        self.offset = self.get_offset(request)
        if self.offset == 0:
            page = list(queryset[: self.limit])
            self.count = len(page) if len(page) < self.limit else self.get_count(queryset)
        else:
            self.count = self.get_count(queryset)
            page = [] if self.offset >= self.count else list(queryset[self.offset : self.offset + self.limit])
        if self.count > self.limit and self.template is not None:
            self.display_page_controls = True
        return page

    def get_schema_operation_parameters(self, view):
        return [
            {
                "name": self.limit_query_param,
                "required": False,
                "in": "query",
                "description": f"Rows per page, 1 to {self.max_limit} (more is served as {self.max_limit}); "
                f"{self.default_limit} when left out.",
                "schema": {"type": "integer", "minimum": 1},
            },
            {
                "name": self.offset_query_param,
                "required": False,
                "in": "query",
                "description": "How many rows to skip; 0 when left out.",
                "schema": {"type": "integer", "minimum": 0},
            },
        ]

    def get_paginated_response(self, data):
        return Response(
            {
                "count": self.count,
                "limit": self.limit,
                "offset": self.offset,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["count", "limit", "offset", "next", "previous", "results"],
            "properties": {
                # The examples frame an operation's example item as a page (drf-spectacular).
                "count": {"type": "integer", "example": 1},
                "limit": {"type": "integer", "example": 50},
                "offset": {"type": "integer", "example": 0},
                "next": {"type": "string", "nullable": True, "format": "uri", "example": None},
                "previous": {"type": "string", "nullable": True, "format": "uri", "example": None},
                "results": schema,
            },
        }


def paginate(*, queryset, serializer_class, request, view, context=None):
    """Paginate a selector's queryset in a plain APIView (HackSoft's helper).

    The view declares `pagination_class`: this helper pages with it, and drf-spectacular reads
    the same attribute to document the envelope and its `limit` / `offset` parameters, so the
    schema cannot say "array" for a view that answers a page.
    """
    pagination_class = getattr(view, "pagination_class", None)
    if pagination_class is None:
        raise ImproperlyConfigured(PAGINATION_CLASS_REQUIRED.format(view=type(view).__name__))
    paginator = pagination_class()
    page = paginator.paginate_queryset(queryset, request, view=view)
    serializer = serializer_class(page, many=True, context=context or {"request": request})
    return paginator.get_paginated_response(serializer.data)

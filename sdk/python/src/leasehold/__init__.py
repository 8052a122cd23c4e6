"""A client of the Leasehold job runner's HTTP API.

``Client`` blocks; ``AsyncClient`` has the same methods for asyncio. Both
read ``LEASEHOLD_URL`` and ``LEASEHOLD_KEY`` when no url or key is given.
"""

from ._async import AsyncClient
from ._protocol import TERMINAL, Event
from ._sync import Client
from . import errors, types
from ._version import __version__
from .errors import (
    APIError,
    BadRequest,
    Conflict,
    LeaseholdError,
    NotFound,
    RateLimited,
    TransportError,
    Unauthorized,
    Unavailable,
)

__all__ = [
    "TERMINAL",
    "APIError",
    "AsyncClient",
    "BadRequest",
    "Client",
    "Conflict",
    "Event",
    "LeaseholdError",
    "NotFound",
    "RateLimited",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "__version__",
    "errors",
    "types",
]

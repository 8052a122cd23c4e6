"""A client of the Leasehold job runner's HTTP API, and a framework for
the handlers that do its jobs' work.

``Client`` blocks; ``AsyncClient`` has the same methods for asyncio. Both
read ``LEASEHOLD_URL`` and ``LEASEHOLD_KEY`` when no url or key is given.
``App`` serves job kinds written as Python functions to Leasehold's
workers, each call with a ``Context``.
"""

from ._async import AsyncClient
from ._handler import App, Context, Fence, Permanent, Signal, StaleToken
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
    "App",
    "AsyncClient",
    "BadRequest",
    "Client",
    "Conflict",
    "Context",
    "Event",
    "Fence",
    "LeaseholdError",
    "NotFound",
    "Permanent",
    "RateLimited",
    "Signal",
    "StaleToken",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "__version__",
    "errors",
    "types",
]

"""The op registry: every scenario op, declared once, one module per family (keys,
locks, evict, requests, host, retraction, sessions, streaming, storage). Import this package to have them all declared;
``spec`` says what a declaration holds."""

# each module declares its ops; this order is the order users see them in
from . import keys  # noqa: F401  isort: skip
from . import locks  # noqa: F401  isort: skip
from . import evict  # noqa: F401  isort: skip
from . import requests  # noqa: F401  isort: skip
from . import host  # noqa: F401  isort: skip
from . import retraction  # noqa: F401  isort: skip
from . import sessions  # noqa: F401  isort: skip
from . import streaming  # noqa: F401  isort: skip
from . import storage  # noqa: F401  isort: skip
from .spec import (  # noqa: F401
    COUNT, DETAIL_RESULTS, DEVICE, FLAG, FLAG_RESULTS, HOST, HOST_PARTS, NAME, NAMESPACES, OPS, STORAGE, TOKENS, Field, FuzzRule, NODE_RESULTS,
    OpSpec,    all_ops, canonical, declare, timed_calls, flag_words, get, host_parts, name_fields, owner, reference_table,
    withdraw,
)

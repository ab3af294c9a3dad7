"""Sliding-window attention KV: only a trailing window stays on the device; older
pages are tombstoned. Device part, host part, config fields and checks.
"""

COMPONENT = ".component:SWAComponent"
HOST_PART = ".host:SWAHostMixin"
CHECKS = ".checks"
FIELDS = ".fields"

"""Sliding-window attention KV: only a trailing window stays on the device; older
pages are tombstoned. Device part, host part and checks.
"""

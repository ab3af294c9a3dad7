"""Mamba/SSM state: one state slot per checkpoint node. Device part, the
checkpoint cap, host part, config fields and checks.
"""

COMPONENT = ".component:MambaComponent"
HOST_PART = ".host:MambaHostMixin"
CHECKS = ".checks"
FIELDS = ".fields"

"""Mamba/SSM state: one state slot per checkpoint node. Device part, the
checkpoint cap, host part and checks.
"""

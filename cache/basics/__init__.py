"""The vocabulary every room speaks: token keys and page hashes, the call records
(params, results, lock receipts), a request's minimal state, errors, violations and
the numpy views the pools share.

Owns nothing stateful. Imports nothing from the cache: it is the floor.
"""

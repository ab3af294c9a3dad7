"""The tiers beside the device pools (SGLang's HiCache): the host tier (its
configuration, what the controller copies to and from host memory), the storage
tier (L3: backup after a host copy's ack, prefetch into host slots, the trailing
window's staging) and the storage backends; they read the controller that owns them
by the protocols of ``owner.py``.

May import: ``basics``, ``observe``, ``pools``, ``tree``, ``components``.
"""

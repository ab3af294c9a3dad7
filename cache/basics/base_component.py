"""The name of Full KV, the component every model has and every tree lists first.

Every room speaks it: the public calls default to it (SGLang's
``available_size(component="full")``), the pool every request's tokens live in is
its, and the tree's first component must be it. Spelled here once, so that no other
module outside its folder names a component; every other fact about a component is
one its folder declares (see ``cache/components/__init__.py``).
"""

FULL = "full"

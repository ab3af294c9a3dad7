"""SGLang's sessions: the scheduler's session controller and the streaming
sessions' KV records. (The tree's session tags live in ``tree.session_refs``.) They read the controller by
``owner.SessionOwner``.

May import every room below ``requests``.
"""

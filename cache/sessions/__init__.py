"""SGLang's sessions: the scheduler's session controller and the streaming
sessions' KV records. (The tree's session tags live in ``tree.session_refs``.)

May import every room below ``requests``.
"""

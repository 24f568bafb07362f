"""SQL storage: the state, runs and commits, behind :class:`storage.store.Store` (see factory.py)."""

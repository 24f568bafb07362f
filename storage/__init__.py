"""SQL storage: the service's state, plan runs and commits, behind :class:`storage.store.Store`."""

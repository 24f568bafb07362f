"""Plan and history storage (SQL); filled in by the daemon issue."""

"""The allocation core: scenario model, plan checker, metrics and policies (pure functions)."""

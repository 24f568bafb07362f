"""The allocation core, pure: scenarios in, grids out (checker, metrics, fast and full modes, policies)."""

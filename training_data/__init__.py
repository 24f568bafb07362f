"""Bundled data: the generated job history and small copies of real traffic traces."""

"""Placeholder: filled in by the issue that owns this family of losses."""

__all__: list[str] = []

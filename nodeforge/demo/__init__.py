"""The demo: fixture upstream artifacts and the ``make demo`` main job (docs/pipeline.md)."""

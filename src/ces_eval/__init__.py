"""ces-eval: a local, schema-first implementation of Google's CES EvaluationService."""

__all__ = ["__version__"]

__version__ = "0.1.0"

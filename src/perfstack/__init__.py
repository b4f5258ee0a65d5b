"""perfstack: audit, measure, profile and estimate the AI compute stack."""

__version__ = "0.1.0"

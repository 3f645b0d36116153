"""sglstack: declarative, verified SGLang serving images."""

__version__ = "0.1.0"

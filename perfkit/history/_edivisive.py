"""E-divisive means (the method lives in perfkit.changepoints, which the level loop uses too)."""

from perfkit.changepoints import Split, e_divisive

__all__ = ["Split", "e_divisive"]

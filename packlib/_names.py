"""Method names and their aliases: the one spelling table, below the registry
(:mod:`packlib.methods`) and below the results that store a method's name."""
from __future__ import annotations

__all__ = ["NAMES", "ALIASES", "registry_name"]

#: Registry names, histogram methods first (the order of ``methods.names()``).
NAMES = ("spfhp", "lpfhp", "nnls", "optimal", "ffd", "bfd")
#: Other spellings users may know; each maps to exactly one registry name.
ALIASES = {"nnlshp": "nnls"}


def registry_name(method) -> str:
    """A stored method name, in the registry's spelling when it has one ("nnlshp" -> "nnls");
    a custom or foreign packer's name is kept as given."""
    if not isinstance(method, str):
        raise TypeError(f"method must be a str, got {type(method).__name__}")
    name = ALIASES.get(method.lower(), method.lower())
    return name if name in NAMES else method

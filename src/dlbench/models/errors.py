"""The registry's errors, in a module that imports nothing: the command line catches them
before any model (and so torch) is loaded."""

from __future__ import annotations


class UnknownModelError(KeyError):
    """A model name the registry does not know; the message names the close matches."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


class ModelSourceError(UnknownModelError):
    """A model named by its source (``hf:``, ``FILE.py:FUNC``) that cannot be built as named: a
    missing file or function, a factory that breaks its contract, a name that would need the
    network. One line, caught where the registry's own errors are."""

"""What a model from a user's Python file takes as input and what one throughput figure counts.

Torch-free on purpose: ``from dlbench import InputSpec`` in a model file must not cost the import
of the registry (see :mod:`dlbench.models.sources` for how the file is loaded).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

KINDS = ("image", "text")
UNITS = ("images", "sequences", "tokens")


@dataclass(frozen=True)
class InputSpec:
    """The input a model built by ``path/to/file.py:factory`` takes.

    Attributes:
        kind: ``image`` (float batches ``[B, 3, size, size]``) or ``text`` (token ids
            ``[B, size]``).
        input_size: image side in pixels, or sequence length.
        num_classes: classes (image: the model returns ``[B, num_classes]`` logits) or vocabulary
            size (text: token ids and targets are drawn below it; ``[B, size, vocab]`` logits).
        unit: what one throughput figure counts; default ``images`` for image models,
            ``tokens`` for text models (``sequences`` counts whole sequences).
        default_batch: the batch used where none is given (``-b default``).
        description: one line shown beside the model's name.
    """

    kind: str
    input_size: int
    num_classes: int
    unit: str | None = None
    default_batch: int = 32
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"InputSpec.kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        for name in ("input_size", "num_classes", "default_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"InputSpec.{name} must be a positive integer, not {value!r}")
        if self.unit is None:  # frozen: set through object.__setattr__, once, here
            object.__setattr__(self, "unit", "images" if self.kind == "image" else "tokens")
        if self.unit not in UNITS:
            raise ValueError(f"InputSpec.unit must be one of {', '.join(UNITS)}, not {self.unit!r}")
        if self.kind == "image" and self.unit != "images":
            raise ValueError(f"an image model counts images, not {self.unit}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "InputSpec":
        """An InputSpec from a dict with the same keys; unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        extra = sorted(set(data) - known)
        if extra:
            raise ValueError(f"unknown InputSpec key(s) {', '.join(extra)}; "
                             f"known: {', '.join(sorted(known))}")
        return cls(**data)

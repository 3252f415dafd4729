"""Your own model in dlbench: a file with a function that builds it and says what it takes.

    dlbench throughput -m examples/my_model.py:build -b 32
    dlbench maxbatch   -m examples/my_model.py:build --precision bf16

The contract (any function name; ``build`` here):

* It returns ``(model, dlbench.InputSpec(...))``, or ``(model, dict)`` with InputSpec's keys.
* ``model`` is a ``torch.nn.Module`` built with random weights; dlbench moves it to the device.
  ``model(x)`` returns logits: ``[B, num_classes]`` for an image model (``x`` is a float batch
  ``[B, 3, input_size, input_size]``), ``[B, input_size, vocab]`` for a text model (``x`` is
  token ids ``[B, input_size]``). A tuple (its first item) or an output with ``.logits`` will do.
* ``InputSpec(kind, input_size, num_classes, unit=None, default_batch=32, description="")``:
  ``kind`` is ``"image"`` or ``"text"``; ``input_size`` the image side in pixels or the sequence
  length; ``num_classes`` the classes or the vocabulary size; ``unit`` what a figure counts
  (``images``; ``tokens`` or ``sequences`` for text; default images or tokens).
* If the function takes an ``input_size`` argument, dlbench passes ``--input-size`` (or None
  for the default) to it; without one, every input size gets the same model.
* dlbench calls it once on PyTorch's meta device (no memory, no time) to read the InputSpec,
  then once per measurement; loss, optimizer, precision and timing are dlbench's, as for the
  registry's models, and so is the FLOP count.
"""

from __future__ import annotations

from torch import nn

from dlbench import InputSpec


def build(input_size: int | None = None) -> tuple[nn.Module, InputSpec]:
    """A small CNN for 64-pixel, 3-channel images in 100 classes (about 0.3M parameters)."""
    size = input_size or 64
    widths = (32, 64, 128)
    layers: list[nn.Module] = []
    channels = 3
    for width in widths:
        layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                   nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        channels = width
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 100))
    return model, InputSpec(kind="image", input_size=size, num_classes=100, default_batch=128,
                            description="3-block CNN from examples/my_model.py")

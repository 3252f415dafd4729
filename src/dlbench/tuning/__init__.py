"""Tuned mode: each model in the fastest configuration dlbench knows for the device.

``levers`` names the techniques (layout, optimizer kernels, attention backend, torch.compile,
CUDA graphs, 16-bit type, batch size) and where each applies; ``search`` tries them one at a
time and keeps those that win (``dlbench tune``); ``recipes`` turns what was kept into the
config ``--tuned`` runs; ``payback`` says how many steps a tuned setup takes to earn back its
compile and capture time.
"""

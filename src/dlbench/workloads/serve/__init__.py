"""Serving under load (``dlbench serve``): a load generator for OpenAI-compatible streaming
endpoints, and dlbench's own stub server.

- :mod:`.sse` reads server-sent events from a byte stream; :mod:`.protocol` builds the request
  bodies and reads the streamed events of ``/v1/completions`` and ``/v1/chat/completions``
  (both pure);
- :mod:`.prompts` makes synthetic prompts of a given token length;
- :mod:`.client` streams one request (aiohttp) and times it; :mod:`.load` runs a load point,
  fixed concurrency or arrivals at a rate, and makes its record;
- :mod:`.stub` is a tiny instant server (pure asyncio) that measures the client's own
  overhead and, in the tests, plays every fault a server can commit;
- :mod:`.model_dir` writes a random-weights model directory with a tokenizer that
  ``transformers serve`` (or any engine) can load.

Nothing here prints; the client and the stub import no torch.
"""

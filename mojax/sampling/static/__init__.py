"""The static engine (``sampler.engine='static'``): the in-graph sampler (``engine``: ``InGraphSampler``,
``build``) and its session of rounds on one shared KV cache (``session``: ``StaticSession``). Its
compiled prefill and ``lax.while_loop`` decode are the shared in-graph core of ``mojax.sampling``
(``api``, ``decode``, ``state``, ``buckets``)."""

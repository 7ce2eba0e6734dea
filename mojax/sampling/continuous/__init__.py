"""The continuous-batching engine (``sampler.engine='continuous'``): N decode slots with their own
cache write positions (``engine``: ``ContinuousSampler``, ``build``), the host queue of rows
(``rows``), the session the driver steps segment by segment (``session``), the compiled slot pieces
(``slots``) and the page allocator of the paged cache (``pages``). It reuses the in-graph core's
decode step (``mojax.sampling.decode``)."""

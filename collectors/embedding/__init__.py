"""Embedding-lookup building blocks shared by the op collector and the workloads: reuse factors of an index batch
(``reuse``), index sources (``indices``, ``locality``) and the batched lookup module (``tbe``)."""

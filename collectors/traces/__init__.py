"""Traces: parse Kineto and execution traces (one parser per format, versioned field configs in ``schemas/``),
link ET nodes to Kineto events, store them content-addressed and as queryable rows. Reading stored rows back is
``pmdb.traces``, shared by every stage."""

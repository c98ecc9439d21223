"""The stored-trace layer, below every stage: the one reader of stored trace rows (``rows``, ``set_rows``), iteration
boundaries (``iterations``), the format-independent graph of a rank's ops (``graph``, built from the store by
``from_store`` over ``units``), the op vocabulary (``vocabulary``: names and categories; ``opmap``: traced op and shapes
-> modelled op and parameters; ``oparg``: arguments by name) and storage-id edges. Parsing and ingest stay in
``collectors.traces``."""

"""Importers of collective results recorded elsewhere (PARAM ``comms.py`` stdout, nccl-tests output and CSV):
one parser per format, driven by header names; one atomic, idempotent import into the store."""

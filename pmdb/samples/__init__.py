"""Small data sets shipped with pmdb, so that a fresh clone demonstrates what needs data recorded elsewhere (each
folder's README says where its data comes from, under which license, and what was cut)."""

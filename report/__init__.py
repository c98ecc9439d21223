"""The offline HTML report of the store (pmdb report): the paper's figures from SQL."""

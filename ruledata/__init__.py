"""The open IDS ruleset: fetching (`fetch.py`), verifying and extracting (`archive.py`),
parsing (`parser.py`), weighting (`weights.py`), building the JSON (`build.py`), the
compromised-IP list (`compromised.py`), the rule data directory and its atomic switch
(`workspace.py`), and the whole preprocess pipeline (`preprocess.py`).

Layer: the lowest; imports nothing of the project. Callers pass what it needs (directories,
URLs, an executor) as arguments.
"""

"""The parts of ``scripts/check_upstream.py``: ``source`` (a release's source read with ``ast`` against
``sglang_ddtree.compat``'s symbol list), ``release`` (fetching and unpacking a release), ``suite`` (the CPU
suite of a commit against a release, in a throw-away venv). Standard library only, no SGLang import."""

"""Loads across several ranks: the parent runner (``runner.py``: configs, preflight, one run folded from
its ranks), the launcher (``launch.py``: fresh rank processes, env:// rendezvous, the rest killed when one
fails) and the rank process (``worker.py``). How the bytes reach the ranks is a ranked strategy
(``workbench.strategies.ranked``), which this room never names."""

"""The settings: every ``WORKBENCH_*`` environment variable and the data root, resolved in one place.

Import a setting from :mod:`workbench.settings.defaults` (``from workbench.settings import defaults``;
its docstring lists every variable). :mod:`~workbench.settings.paths` holds where data lives and which
machine this is (re-exported by ``defaults``), :mod:`~workbench.settings.env` the two primitives both
are written over. Like every room of the ground floor it imports no layer; importing this package
imports nothing.
"""

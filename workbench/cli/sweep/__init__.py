"""Papermill sweeps: the sweep file and its grid points, its values checked against the notebook's parameters, each point's plan, and the points executed."""

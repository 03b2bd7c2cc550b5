"""The notebooks shipped with the package (*.ipynb, copies of the checkout's notebooks/) and their code: each notebook's actions and ipywidgets panel, and what they share."""

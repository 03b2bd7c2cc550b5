"""plotly figures from the ledger's frames — a campaign's attempts, runs and ceilings, the parameter heat map, files of a set, MoE experts and sessions — and their static PNG/SVG copies."""

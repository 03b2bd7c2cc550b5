"""This machine's walls (ceilings): bandwidths no strategy can beat, measured and recorded with their date and settings; the host->device micro-benchmarks; and which wall bounds an attempt."""

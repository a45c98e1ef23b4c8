"""Studies behind the hybrid eviction orders: oracles, diagnostics and trace variants, kept to
rerun the figures in docs/hit_rates.md; not product features."""

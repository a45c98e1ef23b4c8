"""Eviction orders of the auxiliary pools (SWA windows, Mamba states): which evictable
node a component gives up first. Components pick one by name; orders know nodes, not pools."""

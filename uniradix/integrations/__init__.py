"""Integrations of uniradix into serving engines (the top layer: nothing in uniradix imports
them, and only they import an engine)."""

"""One module per method: its formulas and initialisation as a layer mixin, its constants,
its defaults, registered with the core (``registry.py``). The fairseq plugin's model modules
mix in the same classes."""

"""Pieces of the Triton backend (``codegen.triton_backend``): index arithmetic, the tile
emitter, kernel templates (memory-bound kinds, contractions) and launch tuning."""

"""A generative reward model (GenRM) server: pairwise comparison of two responses."""

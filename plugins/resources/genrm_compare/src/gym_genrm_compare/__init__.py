"""Pairwise GenRM comparison of a prompt's rollouts: relative rewards from a generative reward model."""
